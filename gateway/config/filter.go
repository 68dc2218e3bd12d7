package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/gateway/filter"
	"go.yaml.in/yaml/v3"
)

// routeFilter reads a route's filter: a CEL expression (docs/filters.md),
// compiled and type-checked here, so that check refuses what serve would.
// The expression is not ${VAR}-expanded: a $ is CEL's. A compile error is
// reported at the expression's own line: its line within a | block, the
// line of a one-line value.
func (c *checker) routeFilter(in *routeInputs, rc *Route) {
	l := in.f["filter"]
	if l.Node == nil {
		return
	}
	at := join(in.at, "filter")
	if l.Kind != yaml.ScalarNode {
		c.errorf(l.Node, at, "expected a CEL expression such as 'body.type.startsWith(\"payment_intent.\")', got %s", describe(l.Node))
		return
	}
	if strings.TrimSpace(l.Value) == "" {
		c.errorf(l.Node, at, "empty: a CEL expression that is true for the events the route delivers, e.g. 'body.type.startsWith(\"payment_intent.\")'; remove filter to deliver every event")
		return
	}
	f, err := filter.Compile(l.Value)
	var fe *filter.Error
	switch {
	case errors.As(err, &fe):
		line, msg := exprLine(l.Node, fe)
		c.errorf(&yaml.Node{Line: line, Column: l.Column}, at, "%s", msg)
		return
	case err != nil:
		c.errorf(l.Node, at, "%v", err)
		return
	}
	rc.Filter = f
}

// exprLine returns the line of the file where fe, an error of the
// expression n holds, is, and the error's message with where in that line
// (or, when the line can't be told exactly, in the expression) it is. A |
// block keeps the expression's lines as they are in the file, from the
// line after the indicator; any other value is on its own line, or folded
// (a > block, a value over several lines), when the error is placed at its
// first line with the expression's line and column.
func exprLine(n *yaml.Node, fe *filter.Error) (int, string) {
	switch {
	case n.Style&yaml.LiteralStyle != 0:
		return n.Line + fe.Line, fmt.Sprintf("column %d: %s", fe.Column, fe.Msg)
	case n.Style&yaml.FoldedStyle != 0:
		return n.Line + 1, fmt.Sprintf("line %d, column %d of the expression: %s", fe.Line, fe.Column, fe.Msg)
	case !strings.Contains(n.Value, "\n") && fe.Line == 1:
		return n.Line, fmt.Sprintf("column %d: %s", fe.Column, fe.Msg)
	}
	return n.Line, fmt.Sprintf("line %d, column %d of the expression: %s", fe.Line, fe.Column, fe.Msg)
}

// filterItems refuses a filter on a route whose bodies are batches of items
// (its own items: or its provider's): filtering each item, with the item as
// the body, comes with destinations.
func (c *checker) filterItems(in *routeInputs, rc *Route) {
	r := &rc.Route
	if rc.Filter == nil || !batched(r) {
		return
	}
	whose := "its items:"
	if r.Items == nil {
		whose = fmt.Sprintf("provider %s's items (items: none turns them off)", rc.Provider)
	}
	c.errorf(in.own("filter"), join(in.at, "filter"), "can't be combined with a batched body (%s) yet: %s", whose, filterWithItems)
}

// filterWithItems says why a route's filter is refused with items.
const filterWithItems = "a filter over each item comes with destinations; filter a route without items"

// batched reports whether r's bodies are batches of items: its own Items
// or its preset's.
func batched(r *idemhook.Route) bool {
	return r.Items != nil || (r.Preset != nil && r.Preset.Items != nil)
}
