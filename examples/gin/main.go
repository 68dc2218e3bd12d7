// Command gin is a gin webhook receiver whose handler runs once per event:
// an idemhook route becomes gin middleware with Idempotent.
package main

import (
	"log"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/memstore"
)

// newRouter returns the receiver. handle is the webhook's business logic.
func newRouter(store idemhook.Store, handle gin.HandlerFunc) (*gin.Engine, error) {
	mw, err := idemhook.New(store, idemhook.Options{Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	stone, err := mw.Route(idemhook.Route{Source: "stone", InFlight: idemhook.InFlightWait})
	if err != nil {
		return nil, err
	}
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/webhooks/stone", Idempotent(stone), handle)
	return r, nil
}

func main() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	r, err := newRouter(store, func(c *gin.Context) {
		var event struct {
			ID string `json:"id"`
		}
		if err := c.ShouldBindJSON(&event); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		c.JSON(http.StatusOK, gin.H{"received": event.ID})
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(r.Run("127.0.0.1:8080"))
}
