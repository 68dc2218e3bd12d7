package filter_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idemhook/idemhook/gateway/filter"
)

func ExampleCompile() {
	billing, err := filter.Compile(`body.type.startsWith("payment_intent.")`)
	if err != nil {
		panic(err)
	}
	for _, body := range []string{
		`{"type":"payment_intent.succeeded","data":{"object":{"amount":15050}}}`,
		`{"type":"customer.created"}`,
		`not JSON`,
	} {
		ok, err := billing.Match(filter.Input{Body: []byte(body), Header: http.Header{"Stripe-Signature": {"t=1,v1=..."}}})
		fmt.Println(ok, err != nil)
	}

	// A compile error says where, within the expression.
	_, err = filter.Compile("json &&\n  body.tpye == \"x\" &&\n  bdy.amount > 100")
	var fe *filter.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Line, fe.Column, fe.Msg)
	}
	// Output:
	// true false
	// false false
	// true true
	// 3 3 unknown name "bdy" (the variables are body, json, headers, query and path)
}

// Several filters on one event parse its body once.
func ExampleNewVars() {
	destinations := map[string]string{
		"billing": `body.type.startsWith("payment_intent.")`,
		"crm":     `body.type.startsWith("customer.")`,
		"large":   `has(body.data.object.amount) && body.data.object.amount > 100.0`,
	}
	vars := filter.NewVars(filter.Input{Body: []byte(`{"type":"payment_intent.succeeded","data":{"object":{"amount":150.5}}}`)})
	for _, name := range []string{"billing", "crm", "large"} {
		f, err := filter.Compile(destinations[name])
		if err != nil {
			panic(err)
		}
		ok, err := f.MatchVars(vars)
		fmt.Println(name, ok, err)
	}
	// Output:
	// billing true <nil>
	// crm false <nil>
	// large true <nil>
}
