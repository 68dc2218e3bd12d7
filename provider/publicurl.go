package provider

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// The URL a provider called, for the schemes that sign it (Twilio,
// HubSpot): configured as a public_url option, never read from the
// request's X-Forwarded-* headers.

// checkPublicURL checks a public_url option for the provider who (as the
// error names it, e.g. "Twilio") and returns it without a trailing slash.
func checkPublicURL(v, who string) (string, error) {
	if v == "" {
		return "", nil
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "https" && u.Scheme != "http":
		return "", errors.New("is not an http or https URL: give the scheme and host " + who + " calls, e.g. https://hooks.example.com")
	case u.Host == "":
		return "", errors.New("has no host: give the scheme and host " + who + " calls, e.g. https://hooks.example.com")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return "", errors.New("must be a scheme, a host and an optional path prefix, without user, query or fragment (the request's own path and query are appended)")
	}
	return strings.TrimSuffix(v, "/"), nil
}

// calledURLs returns the URL the provider called as the preset can know
// it (public, checked by checkPublicURL, followed by the request's path
// and query; without public, rebuilt from the request: https when it came
// over TLS, else http, and its Host), then the same with the scheme's
// default port added or removed.
func calledURLs(public string, r *http.Request) []string {
	base := public
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	full := base + r.URL.RequestURI()
	u, err := url.Parse(full)
	if err != nil {
		return []string{full}
	}
	port := ":443"
	if u.Scheme == "http" {
		port = ":80"
	}
	prefix := u.Scheme + "://" + u.Host
	rest := full[len(prefix):]
	if u.Port() == "" {
		return []string{full, prefix + port + rest}
	}
	if ":"+u.Port() == port {
		// Not u.Hostname(), which drops an IPv6 literal's brackets.
		return []string{full, u.Scheme + "://" + strings.TrimSuffix(u.Host, port) + rest}
	}
	return []string{full}
}
