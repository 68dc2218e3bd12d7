// Command echo is an echo webhook receiver whose handler runs once per
// event: an idemhook route becomes echo middleware with Idempotent.
package main

import (
	"log"
	"log/slog"
	"net/http"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
	"github.com/labstack/echo/v4"
)

// newServer returns the receiver. handle is the webhook's business logic.
func newServer(store idemhook.Store, handle echo.HandlerFunc) (*echo.Echo, error) {
	mw, err := idemhook.New(store, idemhook.Options{Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	stone, err := mw.Route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner = true
	e.POST("/webhooks/stone", handle, Idempotent(stone))
	return e, nil
}

func main() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	e, err := newServer(store, func(c echo.Context) error {
		var event struct {
			ID string `json:"id"`
		}
		if err := c.Bind(&event); err != nil {
			return err // echo answers 400
		}
		return c.JSON(http.StatusOK, map[string]string{"received": event.ID})
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(e.Start("127.0.0.1:8080"))
}
