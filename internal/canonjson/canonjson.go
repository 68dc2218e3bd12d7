// Package canonjson computes the body hash of idemhook's keys. For a JSON
// body it is the SHA-256 of the compact form Node.js's
// JSON.stringify(JSON.parse(body)) gives. Member order, duplicate members,
// number formatting and string escapes are exactly as V8 does them, so that
// idemhook's keys equal the NestJS guard's. Any other body is hashed as its
// raw bytes. testdata/guard-key-vectors.json at the repository root holds
// vectors made with Node.js itself, and the tests check every one.
package canonjson

import (
	"bytes"
	"crypto/sha256"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of arrays and objects appendCanonicalJSON
// accepts. A deeper body is treated as "not JSON" (hashed as raw bytes).
//
// It is a safety bound, not a Node.js rule. Node 20 with its default stack
// parses deeper bodies, but its JSON.stringify throws RangeError from about
// 4,185 levels on (measured with node v20.20.2). So the NestJS guard never
// produced a key for such a body, and any answer beyond that depth is
// compatible. 10,000 is also encoding/json's own nesting limit.
const maxJSONDepth = 10000

// appendCanonicalJSON appends to dst the text Node.js's
// JSON.stringify(JSON.parse(s)) gives for the body src, and reports true.
// If src is not valid JSON (as JSON.parse judges it), it reports false and
// returns dst unchanged.
//
// s is src decoded from UTF-8 the way Buffer.toString("utf8") does it. Each
// maximal invalid subpart becomes U+FFFD. A leading byte order mark is kept,
// so JSON.parse then rejects it. Beyond JSON.parse's grammar, bodies nested
// deeper than maxJSONDepth are rejected.
//
// The output follows JSON.stringify. It has no insignificant whitespace.
// Numbers are written as Number.prototype.toString writes them, and as null
// when they overflow to Infinity. Strings get the well-formed escaping:
// \" \\ \b \f \n \r \t, other controls and lone surrogates as lowercase
// \uxxxx, and everything else as literal UTF-8. Object members come in the
// order V8 keeps them. Array-index keys come first, in ascending order. The
// other keys follow in order of first appearance. Each key has the value of
// its last occurrence.
//
// It makes one pass over src, writing straight into dst. An object is
// rewritten in place only when it has an index-like or duplicate key.
func appendCanonicalJSON(dst, src []byte) ([]byte, bool) {
	out, _, ok := appendCanonicalScratch(dst, src, nil)
	return out, ok
}

// appendCanonicalScratch is appendCanonicalJSON with a member stack the
// caller may reuse. It returns the stack, possibly grown.
func appendCanonicalScratch(dst, src []byte, ms []jsonMember) ([]byte, []jsonMember, bool) {
	p := canonParser{src: src, dst: slices.Grow(dst, len(src)+8)}
	p.skipSpace()
	ms, ok := p.value(ms[:0])
	if !ok {
		return dst, ms, false
	}
	p.skipSpace()
	if p.pos != len(src) {
		return dst, ms, false
	}
	return p.dst, ms, true
}

// canonScratch is the reusable memory of one body hash. The canonical text
// is only hashed, so neither it nor the member stack outlives the call.
type canonScratch struct {
	text    []byte
	members []jsonMember
}

var canonScratchPool = sync.Pool{New: func() any { return &canonScratch{members: make([]jsonMember, 0, 32)} }}

// maxPooledScratch keeps one huge body from pinning its buffer in the pool.
const maxPooledScratch = 64 << 10

// Sum returns the SHA-256 of body's canonical JSON text, or of the
// raw bytes when body is not JSON.
func Sum(body []byte) [sha256.Size]byte {
	sc := canonScratchPool.Get().(*canonScratch)
	text, ms, ok := appendCanonicalScratch(sc.text[:0], body, sc.members)
	var sum [sha256.Size]byte
	if ok {
		sum = sha256.Sum256(text)
	} else {
		sum = sha256.Sum256(body)
	}
	if cap(text) <= maxPooledScratch && cap(ms) <= maxPooledScratch/32 {
		sc.text, sc.members = text, ms
		canonScratchPool.Put(sc)
	}
	return sum
}

// jsonMember locates one object member already written to the output. The
// quoted key is at dst[keyStart:keyEnd] and the value at dst[valStart:valEnd].
type jsonMember struct {
	keyStart, keyEnd int
	valStart, valEnd int
}

// canonParser holds the state of one appendCanonicalJSON call.
type canonParser struct {
	src   []byte
	pos   int
	dst   []byte
	depth int
	order []int // scratch for sorting an object's members
}

func (p *canonParser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses the value at p.pos, which follows any whitespace. ms holds
// the members of the enclosing objects, innermost last. value returns it,
// possibly grown, with the same length.
func (p *canonParser) value(ms []jsonMember) ([]jsonMember, bool) {
	if p.pos >= len(p.src) {
		return ms, false
	}
	switch c := p.src[p.pos]; c {
	case '{':
		return p.object(ms)
	case '[':
		return p.array(ms)
	case '"':
		return ms, p.str()
	case 't':
		return ms, p.literal("true")
	case 'f':
		return ms, p.literal("false")
	case 'n':
		return ms, p.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return ms, p.number()
		}
		return ms, false
	}
}

func (p *canonParser) literal(word string) bool {
	if !bytes.HasPrefix(p.src[p.pos:], []byte(word)) {
		return false
	}
	p.pos += len(word)
	p.dst = append(p.dst, word...)
	return true
}

func (p *canonParser) array(ms []jsonMember) ([]jsonMember, bool) {
	if p.depth++; p.depth > maxJSONDepth {
		return ms, false
	}
	p.pos++
	p.dst = append(p.dst, '[')
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		p.dst = append(p.dst, ']')
		p.depth--
		return ms, true
	}
	for {
		var ok bool
		if ms, ok = p.value(ms); !ok {
			return ms, false
		}
		p.skipSpace()
		if p.pos >= len(p.src) {
			return ms, false
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
			p.dst = append(p.dst, ',')
			p.skipSpace()
		case ']':
			p.pos++
			p.dst = append(p.dst, ']')
			p.depth--
			return ms, true
		default:
			return ms, false
		}
	}
}

func (p *canonParser) object(ms []jsonMember) ([]jsonMember, bool) {
	if p.depth++; p.depth > maxJSONDepth {
		return ms, false
	}
	p.pos++
	p.dst = append(p.dst, '{')
	body := len(p.dst)
	if ms == nil {
		// The first object allocates the member stack that every object
		// of the call shares. A stack array would escape through the
		// recursion anyway. Sum passes a pooled one.
		ms = make([]jsonMember, 0, 32)
	}
	base := len(ms)
	reorder := false
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		p.dst = append(p.dst, '}')
		p.depth--
		return ms, true
	}
	for {
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return ms, false
		}
		keyStart := len(p.dst)
		if !p.str() {
			return ms, false
		}
		keyEnd := len(p.dst)
		if !reorder && isArrayIndex(p.dst[keyStart+1:keyEnd-1]) {
			reorder = true
		}
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return ms, false
		}
		p.pos++
		p.dst = append(p.dst, ':')
		p.skipSpace()
		valStart := len(p.dst)
		var ok bool
		if ms, ok = p.value(ms); !ok {
			return ms, false
		}
		// Nested objects have popped their own members by now.
		ms = append(ms, jsonMember{keyStart, keyEnd, valStart, len(p.dst)})
		p.skipSpace()
		if p.pos >= len(p.src) {
			return ms, false
		}
		if p.src[p.pos] == '}' {
			p.pos++
			break
		}
		if p.src[p.pos] != ',' {
			return ms, false
		}
		p.pos++
		p.dst = append(p.dst, ',')
		p.skipSpace()
	}
	if reorder || p.hasDuplicateKey(ms[base:]) {
		p.reorder(body, ms[base:])
	}
	ms = ms[:base]
	p.dst = append(p.dst, '}')
	p.depth--
	return ms, true
}

func (p *canonParser) key(m jsonMember) []byte {
	return p.dst[m.keyStart:m.keyEnd]
}

// hasDuplicateKey reports whether two of ms have the same key. Keys are
// compared in their output form, which is one-to-one with the JS string.
func (p *canonParser) hasDuplicateKey(ms []jsonMember) bool {
	if len(ms) <= 16 {
		for i := 1; i < len(ms); i++ {
			k := p.key(ms[i])
			for j := range i {
				if bytes.Equal(k, p.key(ms[j])) {
					return true
				}
			}
		}
		return false
	}
	p.sortByKey(ms)
	for i := 1; i < len(p.order); i++ {
		if bytes.Equal(p.key(ms[p.order[i-1]]), p.key(ms[p.order[i]])) {
			return true
		}
	}
	return false
}

// sortByKey leaves in p.order the indices of ms sorted by key, then index.
func (p *canonParser) sortByKey(ms []jsonMember) {
	p.order = p.order[:0]
	for i := range ms {
		p.order = append(p.order, i)
	}
	slices.SortFunc(p.order, func(a, b int) int {
		if c := bytes.Compare(p.key(ms[a]), p.key(ms[b])); c != 0 {
			return c
		}
		return a - b
	})
}

// reorder rewrites the members ms of the object whose text starts at
// dst[body:] (after the brace) in V8's order. Duplicates are folded into
// their first occurrence with the last value. Array-index keys come first
// in numeric order, then the others in order of first appearance.
func (p *canonParser) reorder(body int, ms []jsonMember) {
	const dead = -1
	p.sortByKey(ms)
	for i := 0; i < len(p.order); {
		j := i + 1
		for j < len(p.order) && bytes.Equal(p.key(ms[p.order[i]]), p.key(ms[p.order[j]])) {
			j++
		}
		if j-i > 1 {
			first, last := p.order[i], p.order[j-1]
			ms[first].valStart, ms[first].valEnd = ms[last].valStart, ms[last].valEnd
			for _, k := range p.order[i+1 : j] {
				ms[k].keyStart = dead
			}
		}
		i = j
	}

	p.order = p.order[:0]
	for i, m := range ms {
		if m.keyStart != dead && isArrayIndex(p.dst[m.keyStart+1:m.keyEnd-1]) {
			p.order = append(p.order, i)
		}
	}
	slices.SortFunc(p.order, func(a, b int) int {
		ka, kb := p.key(ms[a]), p.key(ms[b])
		if len(ka) != len(kb) {
			return len(ka) - len(kb)
		}
		return bytes.Compare(ka, kb)
	})
	for i, m := range ms {
		if m.keyStart != dead && !isArrayIndex(p.dst[m.keyStart+1:m.keyEnd-1]) {
			p.order = append(p.order, i)
		}
	}

	tail := len(p.dst)
	for _, i := range p.order {
		m := ms[i]
		p.dst = append(p.dst, p.dst[m.keyStart:m.keyEnd]...)
		p.dst = append(p.dst, ':')
		p.dst = append(p.dst, p.dst[m.valStart:m.valEnd]...)
		p.dst = append(p.dst, ',')
	}
	n := copy(p.dst[body:], p.dst[tail:len(p.dst)-1]) // without the last comma
	p.dst = p.dst[:body+n]
}

// isArrayIndex reports whether key (unquoted output form) is an ECMAScript
// array index: a canonical decimal integer from 0 to 2^32-2.
func isArrayIndex(key []byte) bool {
	const maxIndex = "4294967294"
	if len(key) == 0 || len(key) > len(maxIndex) || (key[0] == '0' && len(key) > 1) {
		return false
	}
	for _, c := range key {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(key) < len(maxIndex) || string(key) <= maxIndex
}

// str parses the string at p.pos (on its opening quote) and writes it the
// way JSON.stringify does.
func (p *canonParser) str() bool {
	src, dst := p.src, p.dst
	i := p.pos + 1
	dst = append(dst, '"')
	for {
		start := i
		for i < len(src) {
			c := src[i]
			if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			i++
		}
		dst = append(dst, src[start:i]...)
		if i >= len(src) {
			return false
		}
		switch c := src[i]; {
		case c == '"':
			p.dst = append(dst, '"')
			p.pos = i + 1
			return true
		case c == '\\':
			var ok bool
			if dst, i, ok = appendEscape(dst, src, i); !ok {
				return false
			}
		case c < 0x20:
			return false
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r != utf8.RuneError || size > 1 {
				dst = append(dst, src[i:i+size]...)
				i += size
			} else {
				dst = append(dst, "\uFFFD"...)
				i += invalidUTF8Len(src[i:])
			}
		}
	}
}

// appendEscape decodes the escape sequence at src[i] (a backslash), appends
// its output form and returns the index after it.
func appendEscape(dst, src []byte, i int) ([]byte, int, bool) {
	if i+1 >= len(src) {
		return dst, i, false
	}
	var short byte
	switch src[i+1] {
	case '"':
		short = '"'
	case '\\':
		short = '\\'
	case '/':
		return append(dst, '/'), i + 2, true
	case 'b':
		short = 'b'
	case 'f':
		short = 'f'
	case 'n':
		short = 'n'
	case 'r':
		short = 'r'
	case 't':
		short = 't'
	case 'u':
		u, ok := hex4(src[i+2:])
		if !ok {
			return dst, i, false
		}
		i += 6
		if u >= 0xD800 && u <= 0xDBFF && i+1 < len(src) && src[i] == '\\' && src[i+1] == 'u' {
			if lo, ok := hex4(src[i+2:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				return utf8.AppendRune(dst, utf16Pair(u, lo)), i + 6, true
			}
		}
		return appendCodeUnit(dst, u), i, true
	default:
		return dst, i, false
	}
	return append(dst, '\\', short), i + 2, true
}

func utf16Pair(hi, lo rune) rune {
	return 0x10000 + (hi-0xD800)<<10 + (lo - 0xDC00)
}

// appendCodeUnit appends one UTF-16 code unit from a \u escape as
// JSON.stringify does.
func appendCodeUnit(dst []byte, u rune) []byte {
	const hexDigits = "0123456789abcdef"
	switch {
	case u == '"' || u == '\\':
		return append(dst, '\\', byte(u))
	case u == '\b':
		return append(dst, '\\', 'b')
	case u == '\f':
		return append(dst, '\\', 'f')
	case u == '\n':
		return append(dst, '\\', 'n')
	case u == '\r':
		return append(dst, '\\', 'r')
	case u == '\t':
		return append(dst, '\\', 't')
	case u < 0x20 || (u >= 0xD800 && u <= 0xDFFF):
		return append(dst, '\\', 'u',
			hexDigits[u>>12], hexDigits[u>>8&0xF], hexDigits[u>>4&0xF], hexDigits[u&0xF])
	default:
		return utf8.AppendRune(dst, u)
	}
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var u rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | rune(c)
	}
	return u, true
}

// invalidUTF8Len returns the length of the maximal subpart of an ill-formed
// UTF-8 sequence at the start of b, which the WHATWG decoder replaces with
// one U+FFFD. b must not start with a well-formed sequence.
func invalidUTF8Len(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for ; n <= need; n++ {
		if n >= len(b) || b[n] < lo || b[n] > hi {
			return n
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}

// number parses the number at p.pos with JSON's grammar and writes it as
// Number.prototype.toString does.
func (p *canonParser) number() bool {
	src := p.src
	start := p.pos
	i := start
	if src[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i >= len(src):
		return false
	case src[i] == '0':
		i++
	case src[i] >= '1' && src[i] <= '9':
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
	default:
		return false
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(src) && src[i] == '.' {
		i++
		fracStart = i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == fracStart {
			return false
		}
		fracEnd = i
	}
	hasExp := false
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		hasExp = true
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		expStart := i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == expStart {
			return false
		}
	}
	p.pos = i
	text := src[start:i]
	if !hasExp && isShortestDecimal(src[intStart:intEnd], src[fracStart:fracEnd]) {
		if len(text) == 2 && text[0] == '-' && text[1] == '0' {
			text = text[1:] // -0 prints as 0
		}
		p.dst = append(p.dst, text...)
		return true
	}
	// The grammar is checked, so the only error left is ErrRange for a
	// value that overflows to ±Inf (printed as null) or underflows to 0.
	f, _ := strconv.ParseFloat(string(text), 64)
	p.dst = appendJSNumber(p.dst, f)
	return true
}

// isShortestDecimal reports whether a number written without exponent as
// int[.frac] is already in Number.prototype.toString's form (apart from a
// "-0" integer part). That holds when it has at most 15 significant digits
// (so no shorter decimal rounds to the same double), no trailing zero in the
// fraction, and a magnitude toString prints without exponent (>= 1e-6).
func isShortestDecimal(intPart, frac []byte) bool {
	if len(frac) == 0 {
		return len(intPart) <= 15
	}
	if frac[len(frac)-1] == '0' {
		return false
	}
	if len(intPart) == 1 && intPart[0] == '0' {
		zeros := 0
		for frac[zeros] == '0' {
			zeros++
		}
		return zeros <= 5 && len(frac)-zeros <= 15
	}
	return len(intPart)+len(frac) <= 15
}

// appendJSNumber appends f as ECMAScript's Number::toString writes it, or
// null for an infinity, as JSON.stringify does.
func appendJSNumber(dst []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 0) || math.IsNaN(f):
		return append(dst, "null"...)
	case f == 0:
		return append(dst, '0') // also -0
	case f < 0:
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-trip digits, closest to f: "d.ddde±xx".
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	e := bytes.IndexByte(b, 'e')
	var digits [24]byte
	k := 0
	for _, c := range b[:e] {
		if c != '.' {
			digits[k] = c
			k++
		}
	}
	exp, _ := strconv.Atoi(string(b[e+1:]))
	n := exp + 1 // f = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits[:k]...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:k]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits[:k]...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:k]...)
		}
		dst = append(dst, 'e')
		x := n - 1
		if x < 0 {
			dst = append(dst, '-')
			x = -x
		} else {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return dst
}
