//go:build !unix

package cputime

import (
	"errors"
	"time"
)

// Process cannot be read here: it returns errors.ErrUnsupported.
func Process() (time.Duration, error) { return 0, errors.ErrUnsupported }
