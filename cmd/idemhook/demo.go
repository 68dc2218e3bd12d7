package main

import (
	"context"
	"errors"
)

func demo(ctx context.Context, e env) error {
	return errors.New("demo: not built yet")
}
