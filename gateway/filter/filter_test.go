package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func stripeEvent(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/payment_intent_succeeded.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMatch(t *testing.T) {
	stripe := stripeEvent(t)
	js := func(s string) Input { return Input{Body: []byte(s)} }
	tests := []struct {
		name    string
		expr    string
		give    Input
		want    bool
		wantErr string // the error's text holds it; "" for no error
	}{
		// JSON numbers: integers are int, the others double; both compare as numbers.
		{name: "int above", expr: `body.amount > 100`, give: js(`{"amount":150}`), want: true},
		{name: "double above", expr: `body.amount > 100`, give: js(`{"amount":150.5}`), want: true},
		{name: "double below", expr: `body.amount > 100`, give: js(`{"amount":99.5}`), want: false},
		{name: "int against a double literal", expr: `body.amount >= 150.0`, give: js(`{"amount":150}`), want: true},
		{name: "150.0 equals 150", expr: `body.amount == 150`, give: js(`{"amount":150.0}`), want: true},
		{name: "an integer is int", expr: `type(body.amount) == int`, give: js(`{"amount":150}`), want: true},
		{name: "a fraction is double", expr: `type(body.amount) == double`, give: js(`{"amount":150.5}`), want: true},
		{name: "an exponent is double", expr: `type(body.amount) == double && body.amount == 100`, give: js(`{"amount":1e2}`), want: true},
		{name: "an int64 id keeps every digit", expr: `body.id == 9007199254740993`, give: js(`{"id":9007199254740993}`), want: true},
		{name: "int arithmetic", expr: `body.amount / 100 == 150`, give: js(`{"amount":15050}`), want: true},
		{name: "double arithmetic needs a double", expr: `double(body.amount) / 100.0 > 150.0`, give: js(`{"amount":15050}`), want: true},

		// Strings, booleans, null, nested objects, arrays.
		{name: "string equal", expr: `body.type == "payment_intent.succeeded"`, give: js(string(stripe)), want: true},
		{name: "startsWith", expr: `body.type.startsWith("payment_intent.")`, give: js(string(stripe)), want: true},
		{name: "startsWith refuses", expr: `body.type.startsWith("customer.")`, give: js(string(stripe)), want: false},
		{name: "in a literal list", expr: `body.type in ["customer.created", "payment_intent.succeeded"]`, give: js(string(stripe)), want: true},
		{name: "in a body list", expr: `"link" in body.data.object.payment_method_types`, give: js(string(stripe)), want: true},
		{name: "in a body map", expr: `"order_id" in body.data.object.metadata`, give: js(string(stripe)), want: true},
		{name: "nested object", expr: `body.data.object.shipping.address.country == "FR"`, give: js(string(stripe)), want: true},
		{name: "bool", expr: `body.livemode == false`, give: js(string(stripe)), want: true},
		{name: "null field", expr: `body.data.object.invoice == null`, give: js(string(stripe)), want: true},
		{name: "array index", expr: `body.items[1].sku == "b"`, give: js(`{"items":[{"sku":"a"},{"sku":"b"}]}`), want: true},
		{name: "array size", expr: `size(body.items) == 2`, give: js(`{"items":[1,2]}`), want: true},
		{name: "array exists", expr: `body.items.exists(i, i.qty > 2)`, give: js(`{"items":[{"qty":1},{"qty":3.5}]}`), want: true},
		{name: "array all", expr: `body.items.all(i, i.qty > 2)`, give: js(`{"items":[{"qty":1},{"qty":3}]}`), want: false},
		{name: "a body that is an array", expr: `body[0] == "a"`, give: js(`["a"]`), want: true},

		// Missing fields: has() and json guard them; unguarded, they are errors.
		{name: "has() on a missing field", expr: `has(body.data.object.amount) && body.data.object.amount > 1`, give: js(`{"data":{"object":{}}}`), want: false},
		{name: "has() on a present field", expr: `has(body.data.object.amount) && body.data.object.amount > 1`, give: js(`{"data":{"object":{"amount":2}}}`), want: true},
		{name: "missing field unguarded", expr: `body.data.object.amount > 1`, give: js(`{"data":{"object":{}}}`), want: true, wantErr: "no such key: amount"},
		{name: "a type that doesn't fit", expr: `body.amount > 100`, give: js(`{"amount":"150"}`), want: true, wantErr: "no such overload"},
		{name: "a missing index", expr: `body.items[2] == 1`, give: js(`{"items":[1]}`), want: true, wantErr: "index out of bounds"},

		// Bodies that are not JSON.
		{name: "form body: json is false", expr: `json`, give: js(`a=1&b=2`), want: false},
		{name: "form body: guarded", expr: `json && body.type == "x"`, give: js(`a=1&b=2`), want: false},
		{name: "form body: unguarded", expr: `body.type == "x"`, give: js(`a=1&b=2`), want: true, wantErr: "the body is not JSON"},
		{name: "form body: has() is no guard", expr: `has(body.type)`, give: js(`a=1&b=2`), want: true, wantErr: "the body is not JSON"},
		{name: "empty body", expr: `!json`, give: js(``), want: true},
		{name: "blank body", expr: `!json`, give: js(" \n"), want: true},
		{name: "JSON then more", expr: `!json`, give: js(`{"a":1} {"a":2}`), want: true},
		{name: "truncated JSON", expr: `!json`, give: js(`{"a":1`), want: true},
		{name: "a null body is JSON", expr: `json && body == null`, give: js(`null`), want: true},
		{name: "a string body is JSON", expr: `json && body == "hi"`, give: js(` "hi" `), want: true},

		// Headers: lower-case names, first value.
		{name: "header by lower-case name", expr: `headers["x-github-event"] == "push"`,
			give: Input{Header: http.Header{"X-Github-Event": {"push"}}}, want: true},
		{name: "a mixed-case name is not there", expr: `"X-GitHub-Event" in headers`,
			give: Input{Header: http.Header{"X-Github-Event": {"push"}}}, want: false},
		{name: "a non-canonical key is lower-cased", expr: `headers["x-lower"] == "v"`,
			give: Input{Header: http.Header{"x-LOWER": {"v"}}}, want: true},
		{name: "several values: the first", expr: `headers["x-tag"] == "a"`,
			give: Input{Header: http.Header{"X-Tag": {"a", "b"}}}, want: true},
		{name: "a header with no value is absent", expr: `"x-empty" in headers`,
			give: Input{Header: http.Header{"X-Empty": {}}}, want: false},
		{name: "absent header guarded", expr: `"x-none" in headers && headers["x-none"] == "a"`, give: Input{}, want: false},
		{name: "absent header unguarded", expr: `headers["x-none"] == "a"`, give: Input{}, want: true, wantErr: "no such key"},
		{name: "no header at all", expr: `size(headers) == 0`, give: Input{}, want: true},

		// Query and path.
		{name: "query, first value", expr: `query["tenant"] == "acme"`,
			give: Input{Query: url.Values{"tenant": {"acme", "other"}}}, want: true},
		{name: "query names keep their case", expr: `"Tenant" in query`,
			give: Input{Query: url.Values{"tenant": {"acme"}}}, want: false},
		{name: "path", expr: `path.startsWith("/webhooks/") && path.endsWith("/stripe")`,
			give: Input{Path: "/webhooks/eu/stripe"}, want: true},
		{name: "path matches", expr: `path.matches("^/webhooks/[a-z]+/stripe$")`,
			give: Input{Path: "/webhooks/EU/stripe"}, want: false},

		// The variables together, as a route would use them.
		{name: "all together", expr: "json &&\n  body.type.startsWith(\"payment_intent.\") &&\n  headers[\"stripe-signature\"] != \"\" &&\n  query[\"env\"] == \"live\" &&\n  path == \"/webhooks/stripe\"",
			give: Input{Body: stripe, Header: http.Header{"Stripe-Signature": {"t=1,v1=ab"}}, Query: url.Values{"env": {"live"}}, Path: "/webhooks/stripe"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.expr)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			got, err := f.Match(tt.give)
			if got != tt.want {
				t.Errorf("Match = %v, want %v (err %v)", got, tt.want, err)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Match error = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Match error = %v, want one holding %q", err, tt.wantErr)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name     string
		expr     string
		wantLine int
		wantCol  int
		wantMsg  string
	}{
		{name: "unknown variable", expr: `bdy.type == "x"`, wantLine: 1, wantCol: 1,
			wantMsg: `unknown name "bdy" (the variables are body, json, headers, query and path)`},
		{name: "unknown variable, third line", expr: "json &&\n  body.type == \"x\" &&\n  header[\"a\"] == \"b\"", wantLine: 3, wantCol: 3,
			wantMsg: `unknown name "header"`},
		{name: "unknown function", expr: `lower(body.type) == "x"`, wantLine: 1, wantCol: 6, wantMsg: `unknown name "lower"`},
		{name: "syntax error, second line", expr: "body.type == \"x\" &&\n  body.amount > > 1", wantLine: 2, wantCol: 17,
			wantMsg: "syntax error: "},
		{name: "ends early", expr: "body.type ==", wantLine: 1, wantCol: 13,
			wantMsg: "syntax error: the expression ends where more is expected"},
		{name: "unterminated string", expr: "body.type == \"x", wantLine: 1, wantCol: 14, wantMsg: "syntax error: "},
		{name: "more errors are counted", expr: "bdy.a && bdy.b", wantLine: 1, wantCol: 1, wantMsg: "(and 1 more error)"},
		{name: "a type that can't compare", expr: `headers["a"] > 1`, wantLine: 1, wantCol: 14,
			wantMsg: "found no matching overload for '_>_' applied to '(string, int)'"},
		{name: "not a bool: string", expr: `body.type + "x" == "a" ? "yes" : "no"`, wantLine: 1, wantCol: 1,
			wantMsg: "the expression is of type string; a filter must be a bool"},
		{name: "not a bool: int", expr: `size(body.items)`, wantLine: 1, wantCol: 1, wantMsg: "the expression is of type int"},
		{name: "not a bool: dyn", expr: `body.active`, wantLine: 1, wantCol: 1,
			wantMsg: "the expression is of type dyn (unknown until run time: compare it, e.g. body.flag == true)"},
		{name: "empty", expr: ``, wantLine: 1, wantCol: 1, wantMsg: "syntax error: "},
		{name: "too expensive", expr: `body.items.exists(i, body.items.exists(j, i.id == j.id))`, wantLine: 1, wantCol: 1,
			wantMsg: "estimated worst-case cost, 1801481082649968642, is above the limit of 1000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.expr)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want an error", tt.expr, f)
			}
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %T %v, want a *filter.Error", err, err)
			}
			if fe.Line != tt.wantLine || fe.Column != tt.wantCol || !strings.Contains(fe.Msg, tt.wantMsg) {
				t.Errorf("got %d:%d %q, want %d:%d holding %q", fe.Line, fe.Column, fe.Msg, tt.wantLine, tt.wantCol, tt.wantMsg)
			}
			if want := fmt.Sprintf("line %d, column %d: %s", fe.Line, fe.Column, fe.Msg); err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestCompileCostBound(t *testing.T) {
	tests := []struct {
		name string
		expr string
		pass bool
	}{
		{name: "a field", expr: `body.type.startsWith("payment_intent.")`, pass: true},
		{name: "one walk of a body list", expr: `body.items.exists(i, i.sku == "x")`, pass: true},
		{name: "one walk, a richer step", expr: `body.items.all(i, has(i.qty) && i.qty > 0 && i.sku.startsWith("A-") && i.tags.size() < 10)`, pass: true},
		{name: "filter then count", expr: `body.items.filter(i, i.qty > 1).size() > 2`, pass: true},
		{name: "literal words in a body string", expr: `["urgent", "refund"].exists(w, body.description.contains(w))`, pass: true},
		{name: "regex on a body string", expr: `body.description.matches("^Order #[0-9]+")`, pass: true},
		{name: "loop in a loop over body lists", expr: `body.items.exists(i, body.items.exists(j, i.id == j.id && i != j))`, pass: false},
		{name: "loop in a loop, inner list nested", expr: `body.orders.exists(o, o.lines.exists(l, l.sku == "x"))`, pass: false},
		{name: "in over a body list, in a loop", expr: `body.items.exists(i, i.id in body.refunded_ids)`, pass: false},
		{name: "map then loop over each result's list", expr: `body.items.map(i, i.tags).exists(t, t.exists(x, x == "gift"))`, pass: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.expr)
			if tt.pass {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				if c := f.EstimatedCost(); c > MaxEstimatedCost {
					t.Errorf("EstimatedCost = %d, above %d", c, MaxEstimatedCost)
				}
				return
			}
			var fe *Error
			if !errors.As(err, &fe) || !strings.Contains(fe.Msg, "estimated worst-case cost") {
				t.Fatalf("Compile error = %v, want the cost bound", err)
			}
		})
	}
}

// TestMatchLoopSteps runs filters on a list of zeros just under, at, and just
// over MaxLoopSteps: the bound counts every loop of the evaluation together.
func TestMatchLoopSteps(t *testing.T) {
	zeros := func(n int) []byte { return []byte("[" + strings.Repeat("0,", n-1) + "0]") }
	tests := []struct {
		name    string
		expr    string
		n       int
		want    bool
		stopped bool
	}{
		{name: "at the bound", expr: `body.exists(x, x == 1)`, n: MaxLoopSteps, want: false},
		{name: "one over", expr: `body.exists(x, x == 1)`, n: MaxLoopSteps + 1, want: true, stopped: true},
		{name: "an early match stops the walk", expr: `body.exists(x, x == 0)`, n: MaxLoopSteps + 1, want: true},
		{name: "map and filter count too", expr: `body.map(x, x + 1).size() > 0`, n: MaxLoopSteps + 1, want: true, stopped: true},
		{name: "two loops share the bound", expr: `body.exists(x, x == 1) || body.exists(y, y == 2)`, n: MaxLoopSteps/2 + 1, want: true, stopped: true},
		{name: "two loops under the bound", expr: `body.exists(x, x == 1) || body.exists(y, y == 2)`, n: MaxLoopSteps / 2, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Compile(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.Match(Input{Body: zeros(tt.n)})
			if got != tt.want {
				t.Errorf("Match = %v, want %v (err %v)", got, tt.want, err)
			}
			if stopped := err != nil && strings.Contains(err.Error(), "loop steps: the filter was stopped"); stopped != tt.stopped || (err != nil && !stopped) {
				t.Errorf("Match error = %v, want stopped %v", err, tt.stopped)
			}
		})
	}
}

func TestParseJSON(t *testing.T) {
	tests := []struct {
		give   string
		want   any
		wantOK bool
	}{
		{give: `150`, want: int64(150), wantOK: true},
		{give: `-3`, want: int64(-3), wantOK: true},
		{give: `150.5`, want: 150.5, wantOK: true},
		{give: `150.0`, want: 150.0, wantOK: true},
		{give: `1e2`, want: 100.0, wantOK: true},
		{give: `9223372036854775807`, want: int64(math.MaxInt64), wantOK: true},
		{give: `9223372036854775808`, want: 9223372036854775808.0, wantOK: true},
		{give: `1e400`, want: math.Inf(1), wantOK: true},
		{give: `{"a":[1,2.5,{"b":3}],"s":"7"}`, want: map[string]any{"a": []any{int64(1), 2.5, map[string]any{"b": int64(3)}}, "s": "7"}, wantOK: true},
		{give: `null`, want: nil, wantOK: true},
		{give: ``},
		{give: "\t\n "},
		{give: `{`},
		{give: `{} {}`},
		{give: `a=1&b=2`},
		{give: `<xml/>`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, ok := ParseJSON([]byte(tt.give))
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseJSON = %#v, %v; want %#v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestMatchConcurrent runs filters from many goroutines at once, on their own
// inputs and on one shared Vars, and counts every answer (run it with -race).
func TestMatchConcurrent(t *testing.T) {
	billing, err := Compile(`body.type.startsWith("payment_intent.")`)
	if err != nil {
		t.Fatal(err)
	}
	crm, err := Compile(`body.type.startsWith("customer.") && headers["x-env"] == "live"`)
	if err != nil {
		t.Fatal(err)
	}
	shared := NewVars(Input{Body: stripeEvent(t), Header: http.Header{"X-Env": {"live"}}})
	const goroutines, rounds = 8, 200
	var matched, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				typ := "payment_intent.succeeded"
				if (g+r)%2 == 1 {
					typ = "customer.created"
				}
				in := Input{Body: fmt.Appendf(nil, `{"type":%q,"n":%d}`, typ, r), Header: http.Header{"X-Env": {"live"}}}
				b, errB := billing.Match(in)
				c, errC := crm.Match(in)
				if errB != nil || errC != nil || b == c || b != strings.HasPrefix(typ, "payment_intent.") {
					t.Errorf("goroutine %d round %d: billing %v %v, crm %v %v", g, r, b, errB, c, errC)
					return
				}
				sb, errB := billing.MatchVars(shared)
				sc, errC := crm.MatchVars(shared)
				if !sb || sc || errB != nil || errC != nil {
					t.Errorf("shared vars: billing %v %v, crm %v %v", sb, errB, sc, errC)
					return
				}
				if b {
					matched.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if m, r := matched.Load(), refused.Load(); m != goroutines*rounds/2 || r != goroutines*rounds/2 {
		t.Errorf("matched %d, refused %d; want %d each", m, r, goroutines*rounds/2)
	}
}

func TestFilterString(t *testing.T) {
	const expr = "json &&\n  body.type == \"x\""
	f, err := Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	if f.String() != expr {
		t.Errorf("String() = %q, want %q", f.String(), expr)
	}
	if c := f.EstimatedCost(); c == 0 || c > 10 {
		t.Errorf("EstimatedCost() = %d, want a small positive number", c)
	}
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{`body.type.startsWith("payment_intent.")`, "json &&\n  bdy.x", `headers["a"] > 1`,
		`body.items.exists(i, body.items.exists(j, i == j))`, `size(body)`, `"`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		fl, err := Compile(expr)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) || fe.Line < 1 || fe.Column < 1 || fe.Msg == "" {
				t.Fatalf("Compile(%q) error %#v, want a *filter.Error with a position", expr, err)
			}
			return
		}
		if fl.EstimatedCost() > MaxEstimatedCost {
			t.Fatalf("Compile(%q) passed with cost %d", expr, fl.EstimatedCost())
		}
		if ok, err := fl.Match(Input{Body: []byte(`{"a":[1,2.5,"x"],"b":{"c":null}}`), Path: "/p"}); err != nil && !ok {
			t.Fatalf("Match(%q) = false with error %v", expr, err)
		}
	})
}

func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2.5,1e3]`, `9223372036854775808`, ``, `{`, `{} {}`, `a=1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, ok := ParseJSON(body)
		if ok != json.Valid(body) {
			t.Fatalf("ParseJSON(%q) ok = %v, json.Valid = %v", body, ok, !ok)
		}
	})
}
