package canonjson

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// guardVectorsPath is the key vectors made with Node.js by
// testdata/guard-key-vectors.js (which .ci/run re-runs and compares).
const guardVectorsPath = "../../testdata/guard-key-vectors.json"

type guardVector struct {
	Name       string `json:"name"`
	Body       string `json:"body"`
	Normalized string `json:"normalized"`
	Key        string `json:"key"`
}

// loadGuardVectors reads the vectors. A missing file is a failure, not a
// skip, so that CI cannot pass without checking them.
func loadGuardVectors(tb testing.TB) []guardVector {
	tb.Helper()
	raw, err := os.ReadFile(guardVectorsPath)
	if err != nil {
		tb.Fatalf("guard key vectors are required (node testdata/guard-key-vectors.js > %s): %v", guardVectorsPath, err)
	}
	var file struct {
		Vectors []guardVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		tb.Fatalf("decode %s: %v", guardVectorsPath, err)
	}
	if len(file.Vectors) == 0 {
		tb.Fatalf("%s holds no vectors", guardVectorsPath)
	}
	return file.Vectors
}

func TestCanonicalGuardVectors(t *testing.T) {
	for _, tt := range loadGuardVectors(t) {
		t.Run(tt.Name, func(t *testing.T) {
			got, ok := appendCanonicalJSON(nil, []byte(tt.Body))
			if !ok {
				t.Fatalf("appendCanonicalJSON(%q) reported not JSON", tt.Body)
			}
			if string(got) != tt.Normalized {
				t.Errorf("appendCanonicalJSON(%q)\n got %q\nwant %q", tt.Body, got, tt.Normalized)
			}
			sum := Sum([]byte(tt.Body))
			if key := "idem:stone:sha256:" + hex.EncodeToString(sum[:]); key != tt.Key {
				t.Errorf("the key of %q = %s, want %s", tt.Body, key, tt.Key)
			}
		})
	}
}

// Every want below was produced by Node 20's (v20.20.2)
// JSON.stringify(JSON.parse(Buffer.from(give).toString("utf8"))). ok false
// means JSON.parse threw.
var canonicalTests = []struct {
	name string
	give string
	want string
	ok   bool
}{
	{"number 5e-324", "5e-324", "5e-324", true},
	{"number max", "1.7976931348623157e308", "1.7976931348623157e+308", true},
	{"number 0.000001", "0.000001", "0.000001", true},
	{"number 1e-7", "1e-7", "1e-7", true},
	{"number 123e-20", "123e-20", "1.23e-18", true},
	{"number 1E400", "1E400", "null", true},
	{"number -1e400", "[-1e400]", "[null]", true},
	{"number -0.0", "-0.0", "0", true},
	{"number -0", "-0", "0", true},
	{"number 100e-2", "100e-2", "1", true},
	{"number 2^53+1", "9007199254740993", "9007199254740992", true},
	{"number 21 digits", "123456789012345678901", "123456789012345680000", true},
	{"number 1e21", "1e21", "1e+21", true},
	{"number below 1e21", "999999999999999900000", "999999999999999900000", true},
	{"number 0.1e1", "0.1e1", "1", true},
	{"number 1E+2", "1E+2", "100", true},
	{"number 1e-0", "1e-0", "1", true},
	{"number 4.35", "4.35", "4.35", true},
	{"number 0.30000000000000004", "0.30000000000000004", "0.30000000000000004", true},
	{"number 1.5e300", "-1.5e300", "-1.5e+300", true},
	{"number 16 digits", "1234567890123456", "1234567890123456", true},
	{"number 15 digits", "-123456789012345", "-123456789012345", true},
	{"number underflow", "1e-400", "0", true},
	{"number 0.0000010", "0.0000010", "0.000001", true},
	{"escapes", "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u001F\\u0022\\u005C\\u002F\\u00E9\\u20ac\"", "\"\\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\\\"\\\\/\u00e9\u20ac\"", true},
	{"raw DEL and U+2028", "\"\x7f\u2028\u2029\ufeff\"", "\"\x7f\u2028\u2029\ufeff\"", true},
	{"lone surrogates", "\"\\ud800\\u0041\\udc00x\\uDBFF\\uDFFF\\uDFFF\\uD800\\ud83d\"", "\"\\ud800A\\udc00x\U0010ffff\\udfff\\ud800\\ud83d\"", true},
	{"surrogate pair", "\"\\ud83d\\ude00\"", "\"\U0001f600\"", true},
	{"index keys", "{\"4294967295\":1,\"4294967294\":2,\"01\":3,\"1\":4,\"-1\":5,\"0\":6,\"a\":7,\"1.0\":8,\"\\u0032\":9}", "{\"0\":6,\"1\":4,\"2\":9,\"4294967294\":2,\"4294967295\":1,\"01\":3,\"-1\":5,\"a\":7,\"1.0\":8}", true},
	{"nested duplicates", "{\"a\":{\"x\":1,\"x\":2},\"b\":[{\"k\":1,\"k\":{\"z\":0,\"z\":9}}],\"a\":{\"y\":[1,{\"q\":1,\"q\":2}]}}", "{\"a\":{\"y\":[1,{\"q\":2}]},\"b\":[{\"k\":{\"z\":9}}]}", true},
	{"duplicate index keys", "{\"1\":1,\"b\":2,\"1\":3,\"b\":4,\"0\":5}", "{\"0\":5,\"1\":3,\"b\":4}", true},
	{"escaped duplicate key", "{\"a\":1,\"\\u0061\":2}", "{\"a\":2}", true},
	{"empty containers", " { \"a\" : [ ] , \"b\" : { } } ", "{\"a\":[],\"b\":{}}", true},
	{"__proto__ is an ordinary key", "{\"__proto__\":1,\"a\":2,\"__proto__\":{\"x\":1}}", "{\"__proto__\":{\"x\":1},\"a\":2}", true},
	{"top-level string", "\"x\"", "\"x\"", true},
	{"top-level null", " null ", "null", true},
	{"empty", "", "", false},
	{"whitespace only", " \n", "", false},
	{"trailing comma object", "{\"a\":1,}", "", false},
	{"trailing comma array", "[1,]", "", false},
	{"single quotes", "{'a':1}", "", false},
	{"NaN", "NaN", "", false},
	{"Infinity", "[Infinity]", "", false},
	{"leading zeros", "[01]", "", false},
	{"trailing garbage", "{} x", "", false},
	{"two values", "1 2", "", false},
	{"plus sign", "+1", "", false},
	{"dot without digits", "1.", "", false},
	{"leading dot", ".5", "", false},
	{"bad exponent", "1e", "", false},
	{"hex escape short", "\"\\u12\"", "", false},
	{"bad escape", "\"\\x\"", "", false},
	{"raw control char", "\"a\tb\"", "", false},
	{"unterminated string", "\"abc", "", false},
	{"vertical tab space", "\u000b1", "", false},
	{"unquoted key", "{a:1}", "", false},
	{"missing colon", "{\"a\" 1}", "", false},
	{"True", "True", "", false},
	{"nul", "nul", "", false},
	{"comment", "[1]//x", "", false},
	{"invalid UTF-8 in string", "\x22a\xe2\x82b\xed\xa0\x80\xc0\x80\xf4\x90\x80\x80\xff\xf0\x9f\x98\x22", "\"a\ufffdb\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\ufffd\"", true},
	{"truncated sequence before quote", "[\x22\xe2\x22]", "[\"\ufffd\"]", true},
	{"invalid UTF-8 in key", "{\x22\xff\x22:1,\x22\xfe\x22:2}", "{\"\ufffd\":2}", true},
	{"invalid UTF-8 outside string", "[1]\xff", "", false},
	{"UTF-8 BOM", "\xef\xbb\xbf{}", "", false},
	{"NBSP outside string", "\xc2\xa0{}", "", false},
}

func TestCanonicalNodeCases(t *testing.T) {
	for _, tt := range canonicalTests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("prefix:")
			got, ok := appendCanonicalJSON(prefix, []byte(tt.give))
			if ok != tt.ok {
				t.Fatalf("appendCanonicalJSON(%q) ok = %v, want %v (output %q)", tt.give, ok, tt.ok, got)
			}
			if !ok {
				if string(got) != "prefix:" {
					t.Errorf("appendCanonicalJSON(%q) changed dst to %q on failure", tt.give, got)
				}
				return
			}
			if want := "prefix:" + tt.want; string(got) != want {
				t.Errorf("appendCanonicalJSON(%q)\n got %q\nwant %q", tt.give, got, want)
			}
		})
	}
}

func TestCanonicalDepth(t *testing.T) {
	nest := func(open, leaf, close string, n int) []byte {
		return []byte(strings.Repeat(open, n) + leaf + strings.Repeat(close, n))
	}
	tests := []struct {
		name string
		give []byte
		ok   bool
	}{
		{"arrays at the limit", nest("[", "", "]", maxJSONDepth), true},
		{"arrays beyond the limit", nest("[", "", "]", maxJSONDepth+1), false},
		{"objects at the limit", nest(`{"a":`, "1", "}", maxJSONDepth), true},
		{"objects beyond the limit", nest(`{"a":`, "1", "}", maxJSONDepth+1), false},
		{"mixed far beyond the limit", nest(`[{"a":`, "1", "}]", 100000), false},
		{"unclosed far beyond the limit", []byte(strings.Repeat("[", 1<<20)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := appendCanonicalJSON(nil, tt.give)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if ok && !bytes.Equal(got, tt.give) {
				t.Errorf("compact input changed: got %d bytes, want %d", len(got), len(tt.give))
			}
			if json.Valid(tt.give) != tt.ok {
				t.Errorf("json.Valid = %v: the bound no longer matches encoding/json's", !tt.ok)
			}
		})
	}
}

// TestCanonicalLargeObjects covers objects past the pairwise duplicate scan,
// which sort their keys instead.
func TestCanonicalLargeObjects(t *testing.T) {
	var give, want bytes.Buffer
	give.WriteString("{")
	want.WriteString("{")
	for i := range 40 {
		if i > 0 {
			give.WriteString(", ")
			want.WriteString(",")
		}
		give.WriteString(`"k` + strconv.Itoa(i) + `": ` + strconv.Itoa(i))
		want.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	unique := give.String() + "}"
	got, ok := appendCanonicalJSON(nil, []byte(unique))
	if !ok || string(got) != want.String()+"}" {
		t.Fatalf("40 unique keys: got %q, %v", got, ok)
	}

	// Add a duplicate of k3 at the end and index keys among them. k3 keeps
	// its place with the last value, and the indices move first.
	dup := give.String() + `, "7": "seven", "k3": "last", "0": 0}`
	wantDup := strings.Replace(want.String(), `"k3":3`, `"k3":"last"`, 1)
	wantDup = `{"0":0,"7":"seven",` + wantDup[1:] + "}"
	got, ok = appendCanonicalJSON(nil, []byte(dup))
	if !ok || string(got) != wantDup {
		t.Fatalf("duplicate in a large object:\n got %q, %v\nwant %q", got, ok, wantDup)
	}
}

// TestCanonicalNumberFastPath checks that numbers copied verbatim print the
// same as the general path (ParseFloat, then Number::toString).
func TestCanonicalNumberFastPath(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	digits := func(n int, lead bool) string {
		var b strings.Builder
		for i := range n {
			d := r.IntN(10)
			if i == 0 && lead && d == 0 {
				d = 1
			}
			b.WriteByte(byte('0' + d))
		}
		return b.String()
	}
	for range 20000 {
		var s string
		if r.IntN(2) == 0 {
			s = digits(1+r.IntN(16), true)
		} else {
			intPart := "0"
			if r.IntN(2) == 0 {
				intPart = digits(1+r.IntN(14), true)
			}
			s = intPart + "." + strings.Repeat("0", r.IntN(8)) + digits(1+r.IntN(15), false)
		}
		if r.IntN(2) == 0 {
			s = "-" + s
		}
		got, ok := appendCanonicalJSON(nil, []byte(s))
		f, err := strconv.ParseFloat(s, 64)
		if !ok || err != nil {
			t.Fatalf("%s: ok %v, ParseFloat error %v", s, ok, err)
		}
		if want := appendJSNumber(nil, f); string(got) != string(want) {
			t.Fatalf("%s: got %s, general path gives %s", s, got, want)
		}
	}
}

func TestCanonicalAppendJSNumber(t *testing.T) {
	// Wants produced by Node 20's String(x).
	tests := []struct {
		give float64
		want string
	}{
		{math.Inf(1), "null"},
		{math.Inf(-1), "null"},
		{math.Copysign(0, -1), "0"},
		{1e21, "1e+21"},
		{1e20, "100000000000000000000"},
		{1e-6, "0.000001"},
		{1e-7, "1e-7"},
		{-1.5e-7, "-1.5e-7"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{123.456, "123.456"},
		{0.30000000000000004, "0.30000000000000004"},
	}
	for _, tt := range tests {
		if got := appendJSNumber(nil, tt.give); string(got) != tt.want {
			t.Errorf("appendJSNumber(%v) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestCanonicalIsArrayIndex(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"0", true},
		{"7", true},
		{"4294967294", true},
		{"4294967295", false},
		{"9999999999", false},
		{"10000000000", false},
		{"01", false},
		{"-1", false},
		{"1.0", false},
		{"", false},
		{"1a", false},
	}
	for _, tt := range tests {
		if got := isArrayIndex([]byte(tt.give)); got != tt.want {
			t.Errorf("isArrayIndex(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestCanonicalAllocs(t *testing.T) {
	body := []byte(webhookBody)
	dst := make([]byte, 0, 2*len(body))
	allocs := testing.AllocsPerRun(100, func() {
		if _, ok := appendCanonicalJSON(dst[:0], body); !ok {
			t.Fatal("webhook body is not JSON")
		}
	})
	// One for the member stack; dst already has room.
	if allocs > 1 {
		t.Errorf("appendCanonicalJSON allocates %v times per call, want <= 1", allocs)
	}
}

// webhookBody is a typical 1 KiB provider event, pretty-printed.
const webhookBody = `{
  "id": "evt_1QxYz2AbCdEfGhIj",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1732939200,
  "type": "payment_intent.succeeded",
  "livemode": false,
  "pending_webhooks": 1,
  "request": { "id": "req_8Hk2LmNoPqRs", "idempotency_key": "9f1c2d3e-4b5a-6789-abcd-ef0123456789" },
  "data": {
    "object": {
      "id": "pi_3QxYz2AbCdEfGhIj0",
      "object": "payment_intent",
      "amount": 125000,
      "amount_received": 125000,
      "currency": "brl",
      "customer": "cus_R2d2C3po",
      "description": "Pedido #48213 - S\u00e3o Paulo",
      "metadata": { "order_id": "48213", "channel": "web", "coupon": null },
      "payment_method_types": ["card", "pix", "boleto"],
      "status": "succeeded",
      "charges": [
        { "id": "ch_1", "amount": 125000, "fee": 4.35, "captured": true, "outcome": { "risk_score": 12, "network_status": "approved_by_network" } }
      ],
      "shipping": { "name": "Jos\u00e9 da Silva", "address": { "line1": "Av. Paulista, 1000", "city": "S\u00e3o Paulo", "postal_code": "01310-100", "country": "BR" } }
    }
  }
}`

func BenchmarkCanonicalJSON(b *testing.B) {
	body := []byte(webhookBody)
	dst := make([]byte, 0, 2*len(body))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		dst, _ = appendCanonicalJSON(dst[:0], body)
	}
}

// BenchmarkCanonicalSHA256Baseline hashes the raw body: the cost floor of
// Sum without canonicalisation.
func BenchmarkCanonicalSHA256Baseline(b *testing.B) {
	body := []byte(webhookBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		sum := sha256.Sum256(body)
		_ = hex.EncodeToString(sum[:])
	}
}

func BenchmarkSum(b *testing.B) {
	body := []byte(webhookBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		sum := Sum(body)
		_ = hex.EncodeToString(sum[:])
	}
}
