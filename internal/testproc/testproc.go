// Package testproc owns what tests that start real processes share: building
// the binaries they run (the guardian helper, test targets, test servers)
// with the go tool, and proving after the suite that no goroutine and no
// child process of the test binary is left behind.
package testproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Binary names one package to build and where to put it.
type Binary struct {
	// Out is the output path. Main takes a relative Out inside its
	// temporary directory and rewrites it to the absolute path.
	Out string
	Pkg string // import path
}

// Main is the body of a suite's TestMain: it builds bins into a fresh
// temporary directory, runs the tests, and when they pass checks that they
// left nothing behind (Leftovers: goroutines, child processes), failing
// the run otherwise. It removes the directory and exits with the result;
// it does not return.
//
// A relative Out is placed inside the temporary directory and rewritten
// in place to the absolute path, so the suite reads its binaries' paths
// from the same *Binary values it passed:
//
//	var helper = &testproc.Binary{Out: "helper", Pkg: "example.com/cmd/helper"}
//
//	func TestMain(m *testing.M) { testproc.Main(m, helper) }
func Main(m *testing.M, bins ...*Binary) {
	os.Exit(run(m, bins))
}

// run is Main without the exit, so deferred cleanups run first.
func run(m *testing.M, bins []*Binary) int {
	dir, err := os.MkdirTemp("", "testproc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testproc:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	list := make([]Binary, 0, len(bins))
	for _, b := range bins {
		if !filepath.IsAbs(b.Out) {
			b.Out = filepath.Join(dir, b.Out)
		}
		list = append(list, *b)
	}
	if err := Build(list...); err != nil {
		fmt.Fprintln(os.Stderr, "testproc:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := Leftovers(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// Build builds each binary with CGO_ENABLED=0 (the guardian ships static),
// stopping at the first failure, whose error carries the go tool's output.
func Build(bins ...Binary) error {
	for _, b := range bins {
		cmd := exec.Command(GoTool(), "build", "-o", b.Out, b.Pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %w\n%s", b.Pkg, err, out)
		}
	}
	return nil
}

// GoTool is the go command: from PATH, else from the running toolchain.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// ChildrenOf lists the processes whose parent is pid.
func ChildrenOf(pid int) []int {
	var kids []int
	names, _ := filepath.Glob("/proc/[0-9]*")
	for _, n := range names {
		p, err := strconv.Atoi(filepath.Base(n))
		if err != nil {
			continue
		}
		if ppid, _, ok := Stat(p); ok && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}

// Stat reads the parent pid and state letter of pid from /proc/<pid>/stat.
func Stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	f := statFields(b)
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// statFields are the fields of a /proc stat line after the command name
// (which may hold spaces and parentheses): state, ppid, ...
func statFields(b []byte) []string {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// stateOf is the state letter of a /proc stat line (0 if unreadable).
func stateOf(b []byte) byte {
	if f := statFields(b); len(f) > 0 {
		return f[0][0]
	}
	return 0
}

// Running reports whether pid exists and is neither a zombie nor dead.
func Running(pid int) bool {
	_, state, ok := Stat(pid)
	return ok && state != 'Z' && state != 'X'
}

// Leftovers reports what a test binary left behind after its tests: leaked
// goroutines (goleak) and child processes still present in /proc. It
// returns nil when there is nothing; TestMain fails the run otherwise.
func Leftovers() error {
	var problems []string
	if err := goleak.Find(); err != nil {
		problems = append(problems, "goroutine leak: "+err.Error())
	}
	if kids := ChildrenOf(os.Getpid()); len(kids) > 0 {
		problems = append(problems, fmt.Sprintf("child processes left behind: %v", kids))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n"))
}
