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
	rc.Filter = c.filterOf(in.f["filter"], join(in.at, "filter"))
}

// filterOf reads the filter l at at: a route's or a destination's.
func (c *checker) filterOf(l leaf, at string) *filter.Filter {
	if l.Node == nil {
		return nil
	}
	if l.Kind != yaml.ScalarNode {
		c.errorf(l.Node, at, "expected a CEL expression such as 'body.type.startsWith(\"payment_intent.\")', got %s", describe(l.Node))
		return nil
	}
	if strings.TrimSpace(l.Value) == "" {
		c.errorf(l.Node, at, "empty: a CEL expression that is true for the events to deliver, e.g. 'body.type.startsWith(\"payment_intent.\")'; remove filter to deliver every event")
		return nil
	}
	f, err := filter.Compile(l.Value)
	var fe *filter.Error
	switch {
	case errors.As(err, &fe):
		line, msg := exprLine(l.Node, fe)
		c.errorf(&yaml.Node{Line: line, Column: l.Column}, at, "%s", msg)
		return nil
	case err != nil:
		c.errorf(l.Node, at, "%v", err)
		return nil
	}
	return f
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

// filterItems refuses a filter, the route's or a destination's, on a route
// whose items (its own items: or its provider's) reach the backend in mode
// filter, several items in one request: a filter decides per item, on a
// request that holds that item alone (mode split, the default).
func (c *checker) filterItems(in *routeInputs, rc *Route) {
	r := &rc.Route
	if !itemsTogether(r) {
		return
	}
	whose := "its items:"
	if r.Items == nil {
		whose = fmt.Sprintf("provider %s's items", rc.Provider)
	}
	if rc.Filter != nil {
		c.errorf(in.own("filter"), join(in.at, "filter"), "can't be combined with items in mode filter (%s): %s", whose, filterWithItems)
	}
	for j, d := range rc.Destinations {
		if d.Filter != nil {
			n := valueOf(in.own("destinations").Content[j], "filter")
			c.errorf(n, join(d.Field, "filter"), "can't be combined with items in mode filter (%s): %s", whose, filterWithItems)
		}
	}
}

// filterWithItems says why a filter is refused with items in mode filter.
const filterWithItems = "a filter decides for each item on its own, so the items must reach the backend one per request; set items: {mode: split} (the default)"

// itemsTogether reports whether r's bodies are batches of items (its own
// Items or its preset's) whose new items reach the handler together, in
// mode filter.
func itemsTogether(r *idemhook.Route) bool {
	switch {
	case r.Items != nil:
		return r.Items.Mode == idemhook.ItemsFilter
	case r.Preset != nil && r.Preset.Items != nil:
		return r.Preset.Items.Mode == idemhook.ItemsFilter
	}
	return false
}
