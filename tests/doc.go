// Package tests is the module of the gateway's tests whose dependencies a
// library user should not download: the console's browser test (chromedp,
// tests/console) and the load comparison with its chart (golang.org/x/image,
// tests/load). They run the gateway as a program embeds it (package
// gateway), from a configuration file. .ci/run runs them with the other
// nested modules.
package tests
