package config

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secret_env takes a variable's name. Given as $NAME or ${NAME}, the advice
// is the name alone, and the secret never appears in the error.
func TestConfigSecretEnv(t *testing.T) {
	env := envOf("STRIPE_SECRET", "whsec_do_not_show")
	tests := []struct {
		give string
		want string
	}{
		{"$STRIPE_SECRET", "secret_env takes the variable's name: secret_env: STRIPE_SECRET"},
		{`"${STRIPE_SECRET}"`, "secret_env takes the variable's name: secret_env: STRIPE_SECRET"},
		{`"${UNSET}"`, "secret_env takes the variable's name: secret_env: UNSET"},
		{`"${A B}"`, "secret_env takes the name of an environment variable, without $: secret_env: STRIPE_WEBHOOK_SECRET"},
		{`"stripe secret"`, `invalid environment variable name "stripe secret"`},
		{"UNSET", "environment variable UNSET is not set or empty (export it, or use secrets: [${UNSET}])"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			_, err := Parse("idemhook.yaml", []byte(minimal+"    provider: stripe\n    secret_env: "+tt.give+"\n"), env)
			want := "idemhook.yaml:6: routes[0].secret_env: " + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("error:\n got %v\nwant %s", err, want)
			}
			if err != nil && strings.Contains(err.Error(), "whsec_do_not_show") {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

func TestParseSecrets(t *testing.T) {
	const pem = "-----BEGIN PRIVATE KEY-----\nMIIB\nAbCd\n-----END PRIVATE KEY-----\n"
	tests := []struct {
		name      string
		give      string
		want      []string
		wantWarns []string
		wantErr   string
	}{
		{name: "one per line", give: "whsec_new\nwhsec_old\n", want: []string{"whsec_new", "whsec_old"}},
		{name: "no final newline", give: "whsec_new", want: []string{"whsec_new"}},
		{name: "comments, blank lines, spaces and CRs", give: "\ufeff# new, from 2026-12-01\r\n\r\n  whsec_new \t\r\n# old, until the 8th\nwhsec_old\r\n\n", want: []string{"whsec_new", "whsec_old"}},
		{name: "nothing but comments", give: "# none yet\n\n"},
		{name: "a PEM block is one secret", give: "# new key\n" + pem + "\n  " + strings.ReplaceAll(pem, "\n", "\r\n"), want: []string{pem, pem}},
		{name: "a comment after a secret", give: "whsec_new # new\n", want: []string{"whsec_new # new"},
			wantWarns: []string{"line 1: the text after # is part of the secret (a comment goes on a line of its own)"}},
		{name: "a PEM block without its end", give: "a\n-----BEGIN PRIVATE KEY-----\nMIIB\n", wantErr: "the PEM block of line 2 has no -----END line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warns, err := parseSecrets([]byte(tt.give))
			if fmt.Sprint(err) != cmp.Or(tt.wantErr, "<nil>") {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if !slices.Equal(got, tt.want) || !slices.Equal(warns, tt.wantWarns) {
				t.Errorf("secrets %q, warnings %q; want %q, %q", got, warns, tt.want, tt.wantWarns)
			}
		})
	}
}

// secret_file: the route's secrets from a file, with its problems at the
// field's line. Each case writes the file it names in a directory of its
// own (DIR in the messages).
func TestConfigSecretFile(t *testing.T) {
	const secrets = "# rotation of 2026-12-01\nwhsec_new\nwhsec_old\n"
	route := minimal + "    provider: stripe\n"
	tests := []struct {
		name      string
		file      string      // written to DIR/secrets unless empty
		mode      os.FileMode // of the file; default 0600
		give      string      // appended to the route
		env       []string
		wantErr   string // the whole refusal
		wantWarns []string
		want      int // secrets of the route
	}{
		{name: "two secrets", file: secrets, give: "    secret_file: DIR/secrets\n", want: 2},
		{name: "a path from the environment", file: secrets, give: "    secret_file: ${SECRETS}/secrets\n", env: []string{"SECRETS", "DIR"}, want: 2},
		{name: "group-readable", file: secrets, mode: 0o640, give: "    secret_file: DIR/secrets\n", want: 2},
		{name: "world-readable", file: secrets, mode: 0o644, give: "    secret_file: DIR/secrets\n", want: 2,
			wantWarns: []string{"idemhook.yaml:6: routes[0].secret_file: secret file DIR/secrets is readable by every user (mode 0644): chmod o-r DIR/secrets (0600, or 0640 to share it with a group)"}},
		{name: "world-writable", file: secrets, mode: 0o606, give: "    secret_file: DIR/secrets\n", want: 2,
			wantWarns: []string{"idemhook.yaml:6: routes[0].secret_file: secret file DIR/secrets is writable by every user (mode 0606): anyone on the machine can add a secret and sign deliveries with it; chmod o-rw DIR/secrets (0600, or 0640 to share it with a group)"}},
		{name: "missing", give: "    secret_file: DIR/none\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: secret file DIR/none does not exist"},
		{name: "a directory", give: "    secret_file: DIR\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: secret file DIR is a directory: give the file holding the secrets, one per line"},
		{name: "no secret in it", file: "# none yet\n", give: "    secret_file: DIR/secrets\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: secret file DIR/secrets holds no secret (one per line; blank lines and # comments are ignored)"},
		{name: "too large", file: strings.Repeat("x", 1<<20+1), give: "    secret_file: DIR/secrets\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: secret file DIR/secrets is larger than 1MiB: not a file of secrets"},
		{name: "a PEM block without its end", file: "-----BEGIN PRIVATE KEY-----\n", give: "    secret_file: DIR/secrets\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: secret file DIR/secrets: the PEM block of line 1 has no -----END line"},
		{name: "with secret_env", file: secrets, give: "    secret_env: S\n    secret_file: DIR/secrets\n", env: []string{"S", "x"},
			wantErr: "idemhook.yaml:7: routes[0].secret_file: give a route's secrets in one place: secret_file, or secret_env and secrets (the file's lines are then every secret the route accepts, so that removing a line and reloading removes that secret)"},
		{name: "with secrets", file: secrets, give: "    secret_file: DIR/secrets\n    secrets: [x]\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: give a route's secrets in one place: secret_file, or secret_env and secrets (the file's lines are then every secret the route accepts, so that removing a line and reloading removes that secret)"},
		{name: "a variable unset", give: "    secret_file: ${SECRETS}/secrets\n",
			wantErr: "idemhook.yaml:6: routes[0].secret_file: environment variable SECRETS is not set or empty (used as ${SECRETS})"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.file != "" {
				p := filepath.Join(dir, "secrets")
				if err := os.WriteFile(p, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, cmp.Or(tt.mode, 0o600)); err != nil {
					t.Fatal(err)
				}
			}
			env := slices.Clone(tt.env)
			for i := range env {
				env[i] = strings.ReplaceAll(env[i], "DIR", dir)
			}
			cfg, err := Parse("idemhook.yaml", []byte(route+strings.ReplaceAll(tt.give, "DIR", dir)), envOf(env...))
			if tt.wantErr != "" {
				if want := strings.ReplaceAll(tt.wantErr, "DIR", dir); err == nil || err.Error() != want {
					t.Fatalf("error:\n got %v\nwant %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var warns []string
			for _, w := range cfg.Warnings {
				warns = append(warns, strings.ReplaceAll(w.Error(), dir, "DIR"))
			}
			if !slices.Equal(warns, tt.wantWarns) {
				t.Errorf("warnings %q, want %q", warns, tt.wantWarns)
			}
			if rc := cfg.Routes[0]; rc.SecretCount != tt.want || rc.SecretFile != filepath.Join(dir, "secrets") {
				t.Errorf("%d secrets from %q, want %d from DIR/secrets", rc.SecretCount, rc.SecretFile, tt.want)
			}
		})
	}
	t.Run("without a provider", func(t *testing.T) {
		_, err := Parse("idemhook.yaml", []byte(minimal+"    secret_file: /nonexistent\n"), envOf())
		if want := "idemhook.yaml:5: routes[0].secret_file: only used with provider: (the signature check of a preset); set provider or remove secret_file"; err == nil || err.Error() != want {
			t.Errorf("error:\n got %v\nwant %s", err, want)
		}
	})
	t.Run("a named pipe", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "secrets")
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skip("no named pipes here:", err)
		}
		_, err := Parse("idemhook.yaml", []byte(route+"    secret_file: "+p+"\n"), envOf())
		if want := "idemhook.yaml:6: routes[0].secret_file: secret file " + p + " is not a regular file (p---------)"; err == nil || err.Error() != want {
			t.Errorf("error:\n got %v\nwant %s", err, want)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads a file of mode 0000")
		}
		p := filepath.Join(t.TempDir(), "secrets")
		if err := os.WriteFile(p, []byte(secrets), 0); err != nil {
			t.Fatal(err)
		}
		_, err := Parse("idemhook.yaml", []byte(route+"    secret_file: "+p+"\n"), envOf())
		if want := "idemhook.yaml:6: routes[0].secret_file: cannot read secret file " + p + ": permission denied (the gateway runs as uid "; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error:\n got %v\nwant %s...", err, want)
		}
	})
}

func TestExpand(t *testing.T) {
	env := envOf("A", "x", "B", "y z")
	tests := []struct {
		give, want, wantErr string
	}{
		{give: "plain", want: "plain"},
		{give: "${A}", want: "x"},
		{give: "pre-${A}-${B}", want: "pre-x-y z"},
		{give: "$$A costs $5", want: "$A costs $5"},
		{give: "${MISSING:-fallback}", want: "fallback"},
		{give: "${A:-fallback}", want: "x"},
		{give: "${MISSING}", wantErr: "environment variable MISSING is not set or empty (used as ${MISSING})"},
		{give: "${A", wantErr: `unclosed ${ in "${A"`},
		{give: "${1A}", wantErr: `invalid variable name "1A" in ${...}`},
	}
	for _, tt := range tests {
		got, err := expand(tt.give, env)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("expand(%q) error = %v, want %q", tt.give, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
}

// TestExpandBareVariable: "$NAME" without braces is not expanded; taken
// literally it would make, e.g., the admin token the public string
// "$IDEMHOOK_ADMIN_TOKEN". It is an error that says how to write it, and
// the message does not repeat the value (which may be a literal secret).
func TestExpandBareVariable(t *testing.T) {
	env := envOf("TOKEN", "s3cret")
	for _, give := range []string{"$TOKEN", "Bearer-$_X", "abc$Token"} {
		got, err := expand(give, env)
		if err == nil {
			t.Errorf("expand(%q) = %q, want an error", give, got)
			continue
		}
		if !strings.Contains(err.Error(), "${NAME}") || strings.Contains(err.Error(), give) {
			t.Errorf("expand(%q) error = %q, want advice on ${NAME} without the value", give, err)
		}
	}
	// Still literal: $$, a $ before a digit, a space or the end.
	for give, want := range map[string]string{"$$TOKEN": "$TOKEN", "costs $5": "costs $5", "a $ b": "a $ b", "end$": "end$"} {
		if got, err := expand(give, env); err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", give, got, err, want)
		}
	}
	// Through the parser: the error names the file, line and field.
	text := "admin: {listen: \"0.0.0.0:9090\", token: $TOKEN}\n" + minimal
	_, err := Parse("f.yaml", []byte(text), env)
	if err == nil || !strings.Contains(err.Error(), "f.yaml:1: admin.token:") {
		t.Fatalf("Parse error = %v, want f.yaml:1: admin.token: ...", err)
	}
}

func TestParseSizeAndDuration(t *testing.T) {
	sizes := []struct {
		give string
		want int64
	}{
		{"1048576", 1 << 20}, {"5MiB", 5 << 20}, {"512KiB", 512 << 10}, {"1MB", 1000000}, {"2 gib", 2 << 30}, {"10B", 10},
		{"0", 0}, {"-1", 0}, {"1.5MiB", 0}, {"MiB", 0}, {"5XB", 0},
	}
	for _, tt := range sizes {
		got, err := parseSize(tt.give)
		if (err != nil) != (tt.want == 0) || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.give, got, err, tt.want)
		}
	}
	durations := []struct {
		give string
		want time.Duration
	}{
		{"500ms", 500 * time.Millisecond}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"1h30m", 90 * time.Minute},
		{"1x", -1}, {"d", -1}, {"", -1},
	}
	for _, tt := range durations {
		got, err := parseDuration(tt.give)
		if (err != nil) != (tt.want == -1) || (err == nil && got != tt.want) {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
}
