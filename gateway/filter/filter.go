// Package filter compiles and runs the gateway's filters: CEL expressions
// (https://cel.dev) that decide, per event, whether it goes to a route or a
// destination.
//
// A filter sees five variables:
//
//	body     dyn                  the body parsed as JSON; unbound when the body is not JSON
//	json     bool                 whether the body is JSON (false for an empty body)
//	headers  map(string, string)  lower-case names, the first value of each
//	query    map(string, string)  the first value of each query parameter
//	path     string               the request path
//
// and must be a bool: true lets the event through. An expression guards what
// an event may lack with has() or json, which CEL evaluates before the
// guarded part: `json && body.type == "x"`, `has(body.data.object.amount) &&
// body.data.object.amount > 100`.
//
// JSON numbers are int when they are integers that fit an int64 (so ids keep
// every digit) and double otherwise; CEL compares int and double as numbers,
// so `body.amount > 100` holds for 150 and for 150.5.
//
// Every filter is bounded twice: [Compile] refuses an expression whose
// estimated worst-case cost is above [MaxEstimatedCost], and each [Filter.Match]
// stops past [MaxLoopSteps]. docs/filters.md says how to read both.
package filter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
)

const (
	// MaxLoopSteps bounds one evaluation: the steps of all its loops
	// (exists, all, exists_one, map, filter) together. An evaluation that
	// would take one more stops with an error. What a step costs is bounded
	// by [MaxEstimatedCost], and what the expression does outside loops by
	// its own length and the input's, so no filter can run away on one
	// delivery. docs/filters.md has the time it takes here.
	MaxLoopSteps = 100_000

	// MaxEstimatedCost is the highest worst-case cost [Compile] accepts, in
	// CEL's cost units (about one per variable read, field access,
	// comparison or loop step; a tenth per character a string function
	// scans), as CEL's checker estimates it with every list, map and string
	// in the inputs [EstimatedInputSize] long. An expression that walks the
	// body's lists once costs at most a few dozen units per element and
	// passes; one whose work grows with the square of the body (a loop in a
	// loop over body lists, an "in" over a body list inside a loop) is
	// estimated above 10^12 and refused.
	MaxEstimatedCost = 1_000_000_000

	// EstimatedInputSize is the length the cost estimate gives every list,
	// map and string it cannot see: half of the default max_body (5 MiB),
	// since a JSON list or map needs at least two bytes per entry.
	EstimatedInputSize = 5 << 20 / 2
)

// Error is a compile error: the expression does not parse, does not
// type-check to bool, names an unknown variable or function, or would cost
// too much. Line and Column are 1-based, within the expression, so that a
// caller can add the line the expression starts on in its own file.
type Error struct {
	Line   int
	Column int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// Filter is a compiled filter. It is safe for concurrent use.
type Filter struct {
	expr          string
	prg           cel.Program
	estimatedCost uint64
}

// Compile parses and type-checks expr and estimates its cost. An error is an
// [*Error].
func Compile(expr string) (*Filter, error) {
	env, err := environment()
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, issueError(iss.Errors())
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) {
		return nil, &Error{Line: 1, Column: 1, Msg: fmt.Sprintf(
			"the expression is of type %s; a filter must be a bool (true lets the event through)", friendlyType(t))}
	}
	est, err := env.EstimateCost(ast, estimator{})
	if err != nil {
		return nil, &Error{Line: 1, Column: 1, Msg: "estimating the cost: " + err.Error()}
	}
	if est.Max > MaxEstimatedCost {
		return nil, &Error{Line: 1, Column: 1, Msg: fmt.Sprintf(
			"the expression's estimated worst-case cost, %s, is above the limit of %d: its work grows faster than the body "+
				"(a loop inside a loop over body lists?); walk a list once, or test what the event carries (type, ids) first",
			costString(est.Max), MaxEstimatedCost)}
	}
	// The loop bound rides on CEL's interrupt check: it counts the loop steps
	// of one evaluation, all loops together, and looks at the context every
	// MaxLoopSteps+1 steps; the context is always cancelled, so that look
	// ends the evaluation. cel.CostLimit would bound the same work in cost
	// units, but its tracker, in this version of CEL, takes time quadratic in
	// the loop steps (BenchmarkLoopBound measures both).
	prg, err := env.Program(ast, cel.InterruptCheckFrequency(MaxLoopSteps+1))
	if err != nil {
		return nil, &Error{Line: 1, Column: 1, Msg: err.Error()}
	}
	return &Filter{expr: expr, prg: prg, estimatedCost: est.Max}, nil
}

// String returns the expression as compiled.
func (f *Filter) String() string { return f.expr }

// EstimatedCost returns the expression's worst-case cost estimate, at most
// [MaxEstimatedCost].
func (f *Filter) EstimatedCost() uint64 { return f.estimatedCost }

// Match reports whether the event in passes the filter. It parses in.Body;
// to run several filters on one event, parse it once with [NewVars] and call
// [Filter.MatchVars].
//
// On an evaluation error (a field read that the event lacks and no has()
// guards, a type that doesn't fit, more than [MaxLoopSteps]) Match returns
// true with the error: the event passes, and the caller logs the error. A
// filter that fails must not lose an event: the provider has been answered
// and will not send it again, while a consumer can ignore an event it did not
// want.
func (f *Filter) Match(in Input) (bool, error) {
	return f.MatchVars(NewVars(in))
}

// MatchVars is [Filter.Match] on variables already prepared.
func (f *Filter) MatchVars(v *Vars) (bool, error) {
	out, _, err := f.prg.ContextEval(stopped(), v)
	if err != nil {
		if errors.Is(err, interpreter.InterruptError{}) {
			err = fmt.Errorf("more than %d loop steps: the filter was stopped", MaxLoopSteps)
		} else if strings.Contains(err.Error(), "no such attribute(s): body") { // body is unbound only when it is not JSON
			err = fmt.Errorf("%w (the body is not JSON; guard with json && ...)", err)
		}
		return true, fmt.Errorf("filter %q: %w", f.expr, err)
	}
	b, ok := out.(types.Bool)
	if !ok { // the checker proved bool; kept so a surprise is an error, not a panic
		return true, fmt.Errorf("filter %q: result %v is not a bool", f.expr, out)
	}
	return bool(b), nil
}

// Input is what a filter sees of one event.
type Input struct {
	Body   []byte      // the raw body; parsed as JSON when a filter reads body or json
	Header http.Header // canonical or not: names are matched lower-cased
	Query  url.Values
	Path   string
}

// Vars are the variables of one event, each worked out once, on the first
// filter that reads it. Vars are safe for concurrent use.
type Vars struct {
	in Input

	parse   func() parsed
	headers func() map[string]string
	query   func() map[string]string
}

type parsed struct {
	body any
	ok   bool
}

// NewVars prepares the variables of in. Nothing is parsed until a filter
// reads it.
func NewVars(in Input) *Vars {
	return &Vars{
		in:      in,
		parse:   sync.OnceValue(func() parsed { b, ok := ParseJSON(in.Body); return parsed{b, ok} }),
		headers: sync.OnceValue(func() map[string]string { return firstValues(in.Header, true) }),
		query:   sync.OnceValue(func() map[string]string { return firstValues(in.Query, false) }),
	}
}

// ResolveName implements interpreter.Activation.
func (v *Vars) ResolveName(name string) (any, bool) {
	switch name {
	case "body":
		p := v.parse()
		return p.body, p.ok
	case "json":
		return types.Bool(v.parse().ok), true
	case "headers":
		return v.headers(), true
	case "query":
		return v.query(), true
	case "path":
		return types.String(v.in.Path), true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (v *Vars) Parent() interpreter.Activation { return nil }

var _ interpreter.Activation = (*Vars)(nil)

func firstValues(h map[string][]string, lower bool) map[string]string {
	m := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		if lower {
			k = strings.ToLower(k)
		}
		m[k] = vs[0]
	}
	return m
}

// ParseJSON parses a body as a filter sees it: objects as map[string]any,
// arrays as []any, integers that fit an int64 as int64, other numbers as
// float64. ok is false when body is empty or not one JSON value.
func ParseJSON(body []byte) (v any, ok bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return numbers(v), true
}

// numbers replaces, in place, each json.Number by an int64 or a float64.
func numbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		f, _ := t.Float64() // the decoder accepted it as a number; out of range is ±Inf
		return f
	case map[string]any:
		for k, e := range t {
			if _, scalar := e.(string); !scalar {
				t[k] = numbers(e)
			}
		}
	case []any:
		for i, e := range t {
			t[i] = numbers(e)
		}
	}
	return v
}

// environment is the CEL environment every filter compiles in: the standard
// library and the five variables. A cel.Env is immutable and safe for
// concurrent use, so it is built once.
var environment = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("json", cel.BoolType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("query", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("path", cel.StringType),
		cel.CrossTypeNumericComparisons(true),
	)
})

// stopped is the context of every evaluation: already cancelled, so that
// CEL's first interrupt check, after MaxLoopSteps loop steps, stops it.
var stopped = sync.OnceValue(func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
})

// estimator gives every list, map and string the cost estimate cannot size
// the length EstimatedInputSize: what the inputs can hold, and so what can be
// built from them. The elements of a list the expression writes itself (its
// path starts with "@items") are left to CEL, which sizes them exactly.
type estimator struct{}

func (estimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	if p := n.Path(); len(p) > 0 && strings.HasPrefix(p[0], "@") {
		return nil
	}
	return &checker.SizeEstimate{Min: 0, Max: EstimatedInputSize}
}

func (estimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// issueError turns the first of CEL's compile errors into an *Error with a
// message that names the variables a filter has.
func issueError(errs []*cel.Error) error {
	if len(errs) == 0 {
		return &Error{Line: 1, Column: 1, Msg: "invalid expression"}
	}
	e := errs[0]
	msg := strings.TrimSuffix(e.Message, " (in container '')")
	if name, ok := strings.CutPrefix(msg, "undeclared reference to '"); ok {
		name = strings.TrimSuffix(name, "'")
		msg = fmt.Sprintf("unknown name %q (the variables are body, json, headers, query and path)", name)
	}
	if rest, ok := strings.CutPrefix(msg, "Syntax error: "); ok {
		if strings.HasPrefix(rest, "mismatched input '<EOF>'") {
			rest = "the expression ends where more is expected"
		}
		msg = "syntax error: " + rest
	}
	if n := len(errs) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more error%s)", n, plural(n))
	}
	line, col := 1, 1
	if loc := e.Location; loc != nil && loc.Line() > 0 {
		line, col = loc.Line(), max(loc.Column()+1, 1)
	}
	return &Error{Line: line, Column: col, Msg: msg}
}

func friendlyType(t *cel.Type) string {
	if t.IsExactType(types.DynType) {
		return "dyn (unknown until run time: compare it, e.g. body.flag == true)"
	}
	return cel.FormatCELType(t)
}

func costString(c uint64) string {
	if c == ^uint64(0) {
		return "unbounded"
	}
	return strconv.FormatUint(c, 10)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
