//go:build linux

package guardian

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The helper is started with Spec.HelperArgs after argv[0] (a
// multi-command binary selects its helper mode with them); more than
// MaxArgs is an invalid spec and starts nothing.
func TestHelperArgs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	spec := Spec{Command: targetBin.Out, Args: []string{"echo"}, ActivationID: "act-helper-args",
		HelperPath: helperBin.Out, HelperArgs: []string{"helper-mode", "x y"}}
	s, err := Launch(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(s.HelperPID()) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	want := helperBin.Out + "\x00helper-mode\x00x y\x00"
	if string(cmdline) != want {
		t.Errorf("helper argv %q, want %q", strings.ReplaceAll(string(cmdline), "\x00", " "), strings.ReplaceAll(want, "\x00", " "))
	}
	cctx, ccancel := context.WithTimeout(context.Background(), spec.CleanupBudget())
	defer ccancel()
	if res := s.Close(cctx); !res.Confirmed {
		t.Fatalf("cleanup not confirmed: %v", res.Err())
	}

	spec.HelperArgs = make([]string, MaxArgs+1)
	if _, err := Launch(ctx, spec); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("MaxArgs+1 helper arguments: %v", err)
	}
}
