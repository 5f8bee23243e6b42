//go:build !linux

package cputime

import (
	"errors"
	"time"
)

// Thread cannot be read here: it returns errors.ErrUnsupported.
func Thread() (time.Duration, error) { return 0, errors.ErrUnsupported }
