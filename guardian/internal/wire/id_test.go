package wire

import (
	"strings"
	"syscall"
	"testing"
)

func TestValidID(t *testing.T) {
	good := []string{"a", "act-7", "A_b-9", strings.Repeat("x", MaxIDLen)}
	bad := []string{"", strings.Repeat("x", MaxIDLen+1), "bad id", "a/b", "a.b", "é", "a\x00", "a\n"}
	for _, s := range good {
		if !ValidID(s) {
			t.Errorf("ValidID(%q) = false", s)
		}
	}
	for _, s := range bad {
		if ValidID(s) {
			t.Errorf("ValidID(%q) = true", s)
		}
	}
	// Every single byte: exactly the class [A-Za-z0-9_-].
	for c := 0; c < 256; c++ {
		want := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
		if got := ValidID(string([]byte{byte(c)})); got != want {
			t.Errorf("ValidID(%q) = %v", byte(c), got)
		}
	}
}

func TestValidateRefusesBadIDs(t *testing.T) {
	r := LaunchRequest{ActivationID: "bad id", Command: "x"}
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), IDRule) {
		t.Fatalf("got %v", err)
	}
}

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGKILL: SignalKill, syscall.SIGTERM: SignalTerm, syscall.SIGINT: "INT",
		syscall.SIGHUP: "HUP", syscall.SIGPIPE: "PIPE", syscall.SIGSEGV: "SEGV", syscall.SIGABRT: "ABRT",
	} {
		if got := SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", int(sig), got, want)
		}
	}
	if got := SignalName(syscall.Signal(200)); got != "200" {
		t.Errorf("SignalName(200) = %q", got)
	}
}
