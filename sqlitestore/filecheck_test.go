package sqlitestore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhook/idemhook"
	"github.com/idemhook/idemhook/internal/syncbuf"
	"github.com/idemhook/idemhook/sqlitestore"
)

// waitErr polls Get until its error satisfies want, for at most 10s.
func waitErr(t *testing.T, s *sqlitestore.Store, what string, want func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(context.Background(), "idem:t:probe")
		if want(err) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after 10s", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFileDeletedOrReplaced deletes or replaces a real file under an open
// store. Every call fails with ErrFileReplaced and an ERROR is logged. When
// the path names the open file again, the store resumes with its records
// intact.
func TestFileDeletedOrReplaced(t *testing.T) {
	tests := []struct {
		name    string
		lose    func(t *testing.T, path string) // takes the file away from its path
		restore func(t *testing.T, path string) // puts it back, nil if it can't be
		wantMsg string
	}{
		{
			name: "deleted",
			lose: func(t *testing.T, path string) {
				if err := os.Link(path, path+".keep"); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			},
			restore: func(t *testing.T, path string) {
				if err := os.Rename(path+".keep", path); err != nil {
					t.Fatal(err)
				}
			},
			wantMsg: "was deleted",
		},
		{
			name: "replaced by another file",
			lose: func(t *testing.T, path string) {
				other := path + ".other"
				if err := os.WriteFile(other, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Link(path, path+".keep"); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(other, path); err != nil {
					t.Fatal(err)
				}
			},
			restore: func(t *testing.T, path string) {
				if err := os.Rename(path+".keep", path); err != nil {
					t.Fatal(err)
				}
			},
			wantMsg: "is now another file",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "idemhook.db")
			logs := &syncbuf.Buffer{}
			s := newStore(t, openDB(t, path), sqlitestore.Config{
				FileCheckInterval: 5 * time.Millisecond,
				Logger:            slog.New(slog.NewTextHandler(logs, nil)),
			})
			ctx := context.Background()
			claim := &idemhook.Record{State: idemhook.StatePending, Token: "tok", CreatedAt: time.Now()}
			if existing, err := s.Claim(ctx, "idem:t:k", claim, time.Minute); err != nil || existing != nil {
				t.Fatalf("Claim: %v %v", existing, err)
			}

			tt.lose(t, path)
			err := waitErr(t, s, "after the file was lost", func(err error) bool { return errors.Is(err, sqlitestore.ErrFileReplaced) })
			if !strings.Contains(err.Error(), tt.wantMsg) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not say %q and name %s", err, tt.wantMsg, path)
			}
			// Every operation refuses, not only reads.
			if _, err := s.Claim(ctx, "idem:t:new", claim, time.Minute); !errors.Is(err, sqlitestore.ErrFileReplaced) {
				t.Errorf("Claim on a lost file: %v, want ErrFileReplaced", err)
			}
			if err := s.Release(ctx, "idem:t:k", claim); !errors.Is(err, sqlitestore.ErrFileReplaced) {
				t.Errorf("Release on a lost file: %v, want ErrFileReplaced", err)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || strings.Count(logs.String(), "level=ERROR") != 1 {
				t.Errorf("want exactly one ERROR line, log:\n%s", logs)
			}

			tt.restore(t, path)
			waitErr(t, s, "after the file was restored", func(err error) bool { return err == nil })
			rec, err := s.Get(ctx, "idem:t:k")
			if err != nil || rec == nil || rec.State != idemhook.StatePending || rec.Token != "tok" {
				t.Fatalf("after restore, the claim made before is %v, %v", rec, err)
			}
			if !strings.Contains(logs.String(), "calls resume") {
				t.Errorf("no INFO line on resuming, log:\n%s", logs)
			}
		})
	}
}

// An in-memory database has no file to check: New accepts it and calls
// work.
func TestFileCheckInMemory(t *testing.T) {
	mem := newStore(t, openDB(t, ":memory:"), sqlitestore.Config{FileCheckInterval: time.Millisecond})
	time.Sleep(5 * time.Millisecond)
	if _, err := mem.Get(context.Background(), "idem:t:k"); err != nil {
		t.Fatalf("in-memory Get = %v", err)
	}
}

func TestName(t *testing.T) {
	s := newStore(t, openDB(t, ":memory:"), sqlitestore.Config{})
	if s.Name() != "SQLite" {
		t.Fatalf("Name() = %q, want SQLite (the store names itself in the guard's WARN)", s.Name())
	}
}
