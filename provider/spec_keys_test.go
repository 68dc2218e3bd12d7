package provider_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook/provider"
)

// TestSpecPublicKeyForms: an ed25519 public key is read as the provider
// shows it: hex of its 32 bytes (Discord's portal), base64 of them, PEM,
// or hex or base64 of its DER; secret_encoding hex or base64 accepts that
// form only, raw is refused, and a key in no form gets an error naming
// the forms.
func TestSpecPublicKeyForms(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKIXPublicKey(&ecPriv.PublicKey)
	forms := map[string]string{
		"hex":         hex.EncodeToString(pub),
		"HEX":         strings.ToUpper(hex.EncodeToString(pub)),
		"base64":      base64.StdEncoding.EncodeToString(pub),
		"PEM":         string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		"DER hex":     hex.EncodeToString(der),
		"DER base64":  base64.StdEncoding.EncodeToString(der),
		"hex, spaced": " " + hex.EncodeToString(pub) + "\n",
	}
	const ts, body = "1780000000", `{"type":1}`
	sig := hex.EncodeToString(ed25519.Sign(priv, []byte(ts+body)))
	spec := func(enc string) provider.Spec {
		return provider.Spec{Name: "discord", Signature: provider.Signature{Algorithm: "ed25519", Header: "X-Signature-Ed25519",
			Signed: "{timestamp}{body}", Timestamp: provider.Timestamp{Header: "X-Signature-Timestamp"}, SecretEncoding: enc}}
	}
	for name, key := range forms {
		for _, enc := range []string{"", "hex", "base64"} {
			p, err := spec(enc).Preset(provider.Config{Secrets: []string{key}, Now: func() time.Time { return baseTime }})
			wantOK := enc == "" || strings.HasPrefix(strings.ToLower(name), enc) || strings.HasSuffix(name, enc) ||
				(enc == "hex" && name == "hex, spaced")
			if (err == nil) != wantOK {
				t.Errorf("%s with secret_encoding %q: %v", name, enc, err)
				continue
			}
			if err != nil {
				continue
			}
			r := post("/", body)
			r.Header.Set("X-Signature-Timestamp", ts)
			r.Header.Set("X-Signature-Ed25519", sig)
			if err := verify(t, p, r); err != nil {
				t.Errorf("%s with secret_encoding %q: Verify: %v", name, enc, err)
			}
		}
	}
	for _, tt := range []struct{ alg, key, want string }{
		{"ed25519", "not a key", "PEM; hex or base64 of its 32 bytes (Discord's portal shows hex)"},
		{"ed25519", hex.EncodeToString(pub[:31]), "is hex of 31 bytes: neither the key's 32 bytes nor a DER public key"},
		{"ecdsa-sha256", hex.EncodeToString(pub), "write an ecdsa-sha256 public key as PEM, or hex or base64 of its DER"},
	} {
		s := spec("")
		s.Signature.Algorithm = tt.alg
		_, err := s.Preset(provider.Config{Secrets: []string{tt.key}})
		if se := new(provider.SecretError); !errors.As(err, &se) || !strings.Contains(se.Reason, tt.want) {
			t.Errorf("%s key %.20q: %v, want a *SecretError with %q", tt.alg, tt.key, err, tt.want)
		}
	}
	ec := spec("")
	ec.Signature.Algorithm = "ecdsa-sha256"
	if _, err := ec.Preset(provider.Config{Secrets: []string{hex.EncodeToString(ecDER)}}); err != nil {
		t.Errorf("an ECDSA key as hex of its DER: %v", err)
	}
	var se *provider.SpecError
	if _, err := spec("raw").Preset(provider.Config{Secrets: []string{forms["hex"]}}); !errors.As(err, &se) || se.Field != "signature.secret_encoding" {
		t.Errorf("secret_encoding raw with a public key: %v", err)
	}
}
