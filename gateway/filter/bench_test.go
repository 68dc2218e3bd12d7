package filter

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
)

// BenchmarkMatch runs a typical Stripe filter on a 2.3 KB Stripe event,
// against the baseline of json.Unmarshal of the same body, which any
// filter on the body has to pay for.
func BenchmarkMatch(b *testing.B) {
	body := stripeEvent(b)
	f, err := Compile(`body.type.startsWith("payment_intent.")`)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var v any
			if err := json.Unmarshal(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Match", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if ok, err := f.Match(Input{Body: body}); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	// What a filter costs once the body is parsed: the price of each further
	// destination of one event.
	b.Run("MatchVars/parsed", func(b *testing.B) {
		v := NewVars(Input{Body: body})
		v.parse()
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := f.MatchVars(v); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	// A header filter never parses the body.
	b.Run("Match/header", func(b *testing.B) {
		hf, err := Compile(`headers["stripe-signature"].startsWith("t=")`)
		if err != nil {
			b.Fatal(err)
		}
		in := Input{Body: body, Header: map[string][]string{"Stripe-Signature": {"t=1733451294,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"}, "Content-Type": {"application/json"}}}
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := hf.Match(in); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// BenchmarkLoopBound compares the two ways to bound a filter's loops on a
// list of n items: the loop-step bound the package uses, and cel.CostLimit,
// whose cost tracker takes time quadratic in the loop steps in this version
// of CEL (four times the items, about ten times the time).
func BenchmarkLoopBound(b *testing.B) {
	env, err := environment()
	if err != nil {
		b.Fatal(err)
	}
	ast, iss := env.Compile(`body.items.exists(i, i.sku == "none")`)
	if iss.Err() != nil {
		b.Fatal(iss.Err())
	}
	steps, err := Compile(ast.Source().Content())
	if err != nil {
		b.Fatal(err)
	}
	costLimit, err := env.Program(ast, cel.CostLimit(1<<40))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1000, 4000} {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(`{"sku":"s%d","qty":%d}`, i, i)
		}
		v := NewVars(Input{Body: []byte(`{"items":[` + strings.Join(items, ",") + `]}`)})
		v.parse()
		b.Run(fmt.Sprintf("MaxLoopSteps/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := steps.MatchVars(v); ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
		b.Run(fmt.Sprintf("cel.CostLimit/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if out, _, err := costLimit.Eval(v); err != nil || out.Value() != false {
					b.Fatal(out, err)
				}
			}
		})
	}
}
