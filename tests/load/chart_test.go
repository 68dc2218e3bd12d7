package load

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// chartBar is one row of the load comparison's chart: a ratio's median and
// its spread over the rounds.
type chartBar struct {
	label          string
	median, lo, hi float64
	replay         bool
}

// writeChart draws bars as a horizontal bar chart (median as the bar, the
// spread as a whisker, a line at 1.0x) into a PNG file at path.
func writeChart(path, title string, bars []chartBar) error {
	const (
		rowH   = 22
		top    = 50
		labelW = 540
		right  = 40
		width  = 1200
	)
	height := top + rowH*len(bars) + 50
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)

	scaleMax := 1.5
	for _, b := range bars {
		scaleMax = max(scaleMax, b.hi)
	}
	scaleMax = math.Ceil(scaleMax*2) / 2
	x0, x1 := labelW, width-right
	xOf := func(v float64) int { return x0 + int(v/scaleMax*float64(x1-x0)) }

	text := func(x, y int, s string, c color.Color) {
		d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
		d.DrawString(s)
	}
	rect := func(xa, ya, xb, yb int, c color.Color) {
		draw.Draw(img, image.Rect(xa, ya, xb, yb), image.NewUniform(c), image.Point{}, draw.Src)
	}
	black := color.Black
	grey := color.RGBA{200, 200, 200, 255}
	first := color.RGBA{66, 114, 196, 255}
	replay := color.RGBA{237, 125, 49, 255}

	text(10, 20, title, black)
	rect(10, 30, 22, 40, first)
	text(26, 40, "first deliveries", black)
	rect(160, 30, 172, 40, replay)
	text(176, 40, "replays", black)
	text(260, 40, "whisker: lowest to highest round; ratios to the pooled proxy (gateway) or the bare handler of the same framework (library)", black)

	bottom := top + rowH*len(bars)
	for v := 0.0; v <= scaleMax+1e-9; v += 0.5 {
		x := xOf(v)
		c := grey
		if v == 1 {
			c = color.RGBA{120, 120, 120, 255}
		}
		rect(x, top-4, x+1, bottom+4, c)
		text(x-10, bottom+20, fmt.Sprintf("%.1fx", v), black)
	}
	for i, b := range bars {
		y := top + i*rowH
		c := first
		if b.replay {
			c = replay
		}
		text(10, y+15, b.label, black)
		rect(x0, y+4, xOf(b.median), y+rowH-4, c)
		mid := y + rowH/2
		rect(xOf(b.lo), mid, xOf(b.hi)+1, mid+1, black)
		rect(xOf(b.lo), mid-4, xOf(b.lo)+1, mid+5, black)
		rect(xOf(b.hi), mid-4, xOf(b.hi)+1, mid+5, black)
		text(min(xOf(b.hi), xOf(b.median))+6+max(0, xOf(b.hi)-xOf(b.median)), y+15, fmt.Sprintf("%.2fx", b.median), black)
	}
	rect(x0, top-4, x0+1, bottom+4, black)

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
