package idemhook

// appendCanonicalJSON is a placeholder until the Node-compatible
// implementation lands: it treats every body as raw bytes.
func appendCanonicalJSON(dst, src []byte) ([]byte, bool) { return dst, false }
