package gateway

import (
	"embed"
	"net/http"

	"github.com/idemhook/idemhook/gateway/adminapi"
)

// consoleFiles is the web console: one page, its script, its style sheet
// and its icon, plain files with no build step.
//
//go:embed console/index.html console/console.js console/console.css console/favicon.svg
var consoleFiles embed.FS

// consoleHandler serves the console's files at GET /admin/ (the page),
// /admin/console.js, /admin/console.css and /admin/favicon.svg.
//
// They are served without the admin token, because a browser navigating to
// a page cannot send an Authorization header, and the files hold no data. The page
// asks for the token, keeps it in the tab's sessionStorage and sends it as
// "Authorization: Bearer" on every call to the admin API, which checks it
// as for any other client (see docs/gateway.md, "Web console", for why not
// a cookie).
func consoleHandler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", adminapi.ConsoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, consoleFiles, "console/"+name)
	})
}

// handleConsole adds the console and its statistics endpoint to the admin
// mux. The auth wrapper guards the endpoint.
func (g *Gateway) handleConsole(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("GET /admin/{$}", consoleHandler("index.html"))
	mux.Handle("GET /admin/console.js", consoleHandler("console.js"))
	mux.Handle("GET /admin/console.css", consoleHandler("console.css"))
	mux.Handle("GET /admin/favicon.svg", consoleHandler("favicon.svg"))
	mux.Handle("GET /admin/stats", auth(&statsHandler{g: g, maxAge: statsMaxAge}))
}
