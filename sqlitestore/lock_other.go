//go:build !unix

package sqlitestore

import (
	"errors"
	"fmt"
	"os"
)

func lockFile(*os.File) error {
	return fmt.Errorf("file locks: %w", errors.ErrUnsupported)
}
