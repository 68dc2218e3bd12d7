package main

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// Idempotent turns an idemhook route (mw.Route(...)) into echo middleware.
//
// It is echo.WrapMiddleware plus one thing: a handler's returned error is
// answered (by the echo's HTTPErrorHandler) inside the idemhook
// middleware, so that the middleware sees the error's status. With
// echo.WrapMiddleware alone the error would be written after the middleware
// returned. The middleware would then store an empty 200 for an event that
// failed, and the provider's retry would be answered with it instead of
// running again.
func Idempotent(route func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			orig := c.Response()
			route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r) // the body, read by the middleware, is handed on unchanged
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err)
				}
			})).ServeHTTP(orig, c.Request())
			c.SetResponse(orig) // for the middlewares outside: the status and size sent
			return nil
		}
	}
}
