package provider

import (
	"bytes"
	"encoding/json"
)

// jsonID is an identifier in a JSON body: a string, or a number kept as
// written (Mercado Pago's notification id is a number). null and absent give
// "".
type jsonID string

// UnmarshalJSON accepts a string, a number or null. Anything else gives "".
func (id *jsonID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*id = ""
	case b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*id = jsonID(s)
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		*id = jsonID(b)
	default:
		*id = ""
	}
	return nil
}

// decodeEvent decodes body into v and reports whether it was a JSON object
// of the expected shape. Keys are best-effort. A body that is not one gives
// no key, and the middleware falls back to the body hash.
func decodeEvent(body []byte, v any) bool {
	return json.Unmarshal(body, v) == nil
}

// topLevelID returns the string or number at body[field], or "".
func topLevelID(body []byte, field string) string {
	var raw map[string]json.RawMessage
	if !decodeEvent(body, &raw) {
		return ""
	}
	var id jsonID
	if v, ok := raw[field]; !ok || id.UnmarshalJSON(v) != nil {
		return ""
	}
	return string(id)
}
