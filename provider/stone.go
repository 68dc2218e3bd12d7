package provider

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/idemhook/idemhook"
)

// StoneEventIDHeader is the header Stone Openbank sends the event id in.
const StoneEventIDHeader = "x-stone-webhook-event-id"

// Go, not a spec: the body is a JWE (RSA-OAEP-256, A256GCM) to decrypt with the
// application's private key, wrapping an RS256 JWS checked against Stone's JWKS;
// a spec signs nothing of the kind.

// Stone returns the preset for Stone Openbank (Stone Conta API) webhooks.
//
// What Stone signs: no header. The body is {"encrypted_body": "<JWE>"}. The
// JWE is compact (alg RSA-OAEP-256, enc A256GCM) and encrypted to the public
// key you registered for your application. It wraps a compact JWS (RS256)
// signed with a key from Stone's JWKS
// (https://api.openbank.stone.com.br/api/v1/discovery/keys, sandbox host for
// sandbox). The signed content is the JWT claims, that is the event
// (event_type, target_data, ...) with iat, nbf and jti.
//
// Verify decrypts and checks exactly that, with the standard library only.
// cfg.Secrets are your application's RSA private keys in PEM (PKCS#1 or
// PKCS#8), several during a rotation. Stone's public signing keys are given
// as StoneOptions.JWKS or StoneOptions.PublicKey. StoneOptions.JWKS is the
// JSON document of the discovery URL. Of its keys, the RSA keys with use
// "sig" or no use are taken. StoneOptions.PublicKey is one PEM public key.
// The JWS "kid"
// selects the key when the JWKS has it. Nothing is fetched at request time,
// so refresh the option when Stone rotates its keys. Only when
// cfg.Tolerance is set is the JWT "iat" required within it of now, because
// Stone retries for a whole day and does not say whether iat is renewed per
// attempt.
//
// Key: the x-stone-webhook-event-id header when present, otherwise the body
// hash (the NestJS guard's key). Caveat: that header is not covered by the
// JWS. The body hash is not stable if Stone re-encrypts the JWE per attempt
// (JWE uses a random key and IV). Stone documents neither point.
//
// Duplicates: the stored status (any 2xx). Options: StoneOptions (one of JWKS and
// PublicKey is required).
func Stone(cfg Config) (*idemhook.Preset, error) {
	s, err := cfg.check("stone")
	if err != nil {
		return nil, err
	}
	var privs []*rsa.PrivateKey
	for i, sec := range s.secrets {
		k, err := parseRSAPrivateKey(sec)
		if err != nil {
			return nil, fmt.Errorf("provider stone: secret #%d: %v", i+1, err)
		}
		privs = append(privs, k)
	}
	pubs, err := stonePublicKeys(cfg.Stone.JWKS, cfg.Stone.PublicKey)
	if err != nil {
		return nil, err
	}
	checkAge := cfg.Tolerance > 0
	return &idemhook.Preset{
		Name:        "stone",
		RetryWindow: stoneRetryWindow,
		Verify: func(r *http.Request, body []byte) error {
			claims, err := openStoneBody(body, privs, pubs)
			if err != nil {
				reason := ErrNoMatchingSignature
				if errors.Is(err, ErrMalformedBody) {
					reason = ErrMalformedBody
				}
				return s.fail("", reason, err.Error())
			}
			if checkAge {
				var c struct {
					IAT *json.Number `json:"iat"`
				}
				if json.Unmarshal(claims, &c) != nil || c.IAT == nil {
					return s.fail("", ErrTimestampOutOfTolerance, "the JWT has no iat claim")
				}
				n, err := c.IAT.Int64()
				if err != nil {
					return s.fail("", ErrTimestampOutOfTolerance, "the JWT iat claim is not whole seconds")
				}
				if err := s.checkAge("", time.Unix(n, 0)); err != nil {
					return err
				}
			}
			return nil
		},
		Key: func(r *http.Request, body []byte) (string, error) {
			return strings.TrimSpace(r.Header.Get(StoneEventIDHeader)), nil
		},
	}, nil
}

// stoneKey is one of Stone's public signing keys.
type stoneKey struct {
	kid string
	pub *rsa.PublicKey
}

// openStoneBody decrypts the JWE of a Stone body with one of privs, checks
// the JWS inside against pubs and returns the JWT claims.
func openStoneBody(body []byte, privs []*rsa.PrivateKey, pubs []stoneKey) ([]byte, error) {
	var env struct {
		EncryptedBody string `json:"encrypted_body"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.EncryptedBody == "" {
		return nil, fmt.Errorf("%w: want a JSON object with an encrypted_body string", ErrMalformedBody)
	}
	jws, err := decryptJWE(env.EncryptedBody, privs)
	if err != nil {
		return nil, err
	}
	return verifyJWS(jws, pubs)
}

// decryptJWE opens a compact RSA-OAEP-256 / A256GCM JWE.
func decryptJWE(compact string, privs []*rsa.PrivateKey) ([]byte, error) {
	parts := strings.Split(compact, ".")
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: encrypted_body is not a compact JWE (5 parts)", ErrMalformedBody)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Enc string `json:"enc"`
		Zip string `json:"zip"`
	}
	raw := make([][]byte, 5)
	for i, p := range parts {
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil {
			return nil, fmt.Errorf("%w: JWE part %d is not base64url", ErrMalformedBody, i+1)
		}
		raw[i] = b
	}
	if json.Unmarshal(raw[0], &hdr) != nil {
		return nil, fmt.Errorf("%w: JWE header is not JSON", ErrMalformedBody)
	}
	if hdr.Alg != "RSA-OAEP-256" || hdr.Enc != "A256GCM" || hdr.Zip != "" {
		return nil, fmt.Errorf("%w: JWE alg %q enc %q zip %q, want RSA-OAEP-256, A256GCM, none", ErrMalformedBody, hdr.Alg, hdr.Enc, hdr.Zip)
	}
	iv, ciphertext, tag := raw[2], raw[3], raw[4]
	if len(iv) != 12 || len(tag) != 16 {
		return nil, fmt.Errorf("%w: JWE IV or tag has the wrong length", ErrMalformedBody)
	}
	sealed := append(append([]byte{}, ciphertext...), tag...)
	for _, priv := range privs {
		cek, err := rsa.DecryptOAEP(sha256.New(), nil, priv, raw[1], nil)
		if err != nil || len(cek) != 32 {
			continue
		}
		block, err := aes.NewCipher(cek)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		// The additional data is the ASCII of the encoded protected header.
		if plain, err := gcm.Open(nil, iv, sealed, []byte(parts[0])); err == nil {
			return plain, nil
		}
	}
	return nil, errors.New("the JWE does not decrypt with any configured private key")
}

// verifyJWS checks a compact RS256 JWS and returns its payload.
func verifyJWS(compact []byte, pubs []stoneKey) ([]byte, error) {
	parts := bytes.Split(bytes.TrimSpace(compact), []byte("."))
	if len(parts) != 3 {
		return nil, fmt.Errorf("%w: the decrypted JWE is not a compact JWS (3 parts)", ErrMalformedBody)
	}
	hdrJSON, err1 := base64.RawURLEncoding.DecodeString(string(parts[0]))
	payload, err2 := base64.RawURLEncoding.DecodeString(string(parts[1]))
	sig, err3 := base64.RawURLEncoding.DecodeString(string(parts[2]))
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, fmt.Errorf("%w: a JWS part is not base64url", ErrMalformedBody)
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if json.Unmarshal(hdrJSON, &hdr) != nil {
		return nil, fmt.Errorf("%w: JWS header is not JSON", ErrMalformedBody)
	}
	if hdr.Alg != "RS256" {
		return nil, fmt.Errorf("%w: JWS alg %q, want RS256", ErrMalformedBody, hdr.Alg)
	}
	digest := sha256.Sum256(compact[:len(parts[0])+1+len(parts[1])])
	candidates := pubs
	if hdr.Kid != "" {
		var byKid []stoneKey
		for _, k := range pubs {
			if k.kid == hdr.Kid {
				byKid = append(byKid, k)
			}
		}
		if len(byKid) > 0 {
			candidates = byKid
		}
	}
	for _, k := range candidates {
		if rsa.VerifyPKCS1v15(k.pub, crypto.SHA256, digest[:], sig) == nil {
			return payload, nil
		}
	}
	return nil, fmt.Errorf("the JWS (kid %q) does not verify with any configured Stone public key", hdr.Kid)
}

// parseRSAPrivateKey reads a PEM RSA private key, PKCS#1 or PKCS#8.
func parseRSAPrivateKey(text string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		return nil, errors.New("not a PEM private key (want your application's RSA private key)")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("PEM block is neither a PKCS#1 nor a PKCS#8 private key")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("private key is not RSA")
	}
	return rk, nil
}

func stoneOption(name, reason string) error {
	return &OptionError{Preset: "stone", Option: name, Reason: reason}
}

// stonePublicKeys reads the jwks and public_key options.
func stonePublicKeys(jwks, pemKey string) ([]stoneKey, error) {
	var keys []stoneKey
	if pemKey != "" {
		block, _ := pem.Decode([]byte(pemKey))
		if block == nil {
			return nil, stoneOption("public_key", "is not a PEM public key")
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, stoneOption("public_key", err.Error())
		}
		rk, ok := k.(*rsa.PublicKey)
		if !ok {
			return nil, stoneOption("public_key", "is not an RSA key")
		}
		keys = append(keys, stoneKey{pub: rk})
	}
	if jwks != "" {
		var set struct {
			Keys []struct {
				Kty string `json:"kty"`
				Use string `json:"use"`
				Kid string `json:"kid"`
				N   string `json:"n"`
				E   string `json:"e"`
			} `json:"keys"`
		}
		if err := json.Unmarshal([]byte(jwks), &set); err != nil {
			return nil, stoneOption("jwks", "is not a JWKS JSON document: "+err.Error())
		}
		for _, k := range set.Keys {
			if k.Kty != "RSA" || (k.Use != "" && k.Use != "sig") {
				continue
			}
			n, err1 := base64.RawURLEncoding.DecodeString(k.N)
			e, err2 := base64.RawURLEncoding.DecodeString(k.E)
			if err1 != nil || err2 != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
				return nil, stoneOption("jwks", fmt.Sprintf("key %q has a malformed n or e", k.Kid))
			}
			exp := new(big.Int).SetBytes(e)
			keys = append(keys, stoneKey{kid: k.Kid, pub: &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(exp.Int64())}})
		}
	}
	if len(keys) == 0 {
		return nil, stoneOption("jwks", "no Stone public signing key: set option jwks (the JSON of Stone's discovery/keys URL) or public_key (PEM)")
	}
	return keys, nil
}
