module github.com/idemhook/idemhook/examples/chi

go 1.26.8

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/idemhook/idemhook v0.0.0
)

replace github.com/idemhook/idemhook => ../..
