package testproc

import (
	"os/exec"
	"strings"
	"testing"
)

// Leftovers must notice a child that is still there, and be quiet once it
// is reaped.
func TestLeftoversSeesChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := Leftovers()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err == nil || !strings.Contains(err.Error(), "child processes left behind") {
		t.Fatalf("Leftovers with a live child: %v", err)
	}
	if err := Leftovers(); err != nil {
		t.Fatalf("Leftovers after reaping: %v", err)
	}
}
