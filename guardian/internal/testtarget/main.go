// Command testtarget is the guardian tests' stand-in for an MCP server. Its
// first argument picks a behaviour:
//
//	echo             copy stdin to stdout, exit 0 at stdin EOF
//	marker PATH      create PATH, then echo (proves a launch happened)
//	stderr           write a line to stderr, then echo
//	exit CODE        write "bye\n" and exit with CODE at once
//	ignoreterm       ignore SIGTERM and stdin EOF; print "ready\n"; sleep
//	orphan           start "sleep" holding our stdout, print "child PID\n",
//	                 then echo (the sleeper is orphaned when we exit)
//	sleep            sleep for a minute
//	flood            write to stdout as fast as possible, forever
//	giant N          write one N-byte line, then echo
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testtarget MODE [ARG]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "echo":
		echo()
	case "marker":
		if err := os.WriteFile(os.Args[2], []byte("started\n"), 0o644); err != nil {
			os.Exit(3)
		}
		echo()
	case "stderr":
		fmt.Fprintln(os.Stderr, "to-stderr")
		echo()
	case "exit":
		code, _ := strconv.Atoi(os.Args[2])
		fmt.Println("bye")
		os.Exit(code)
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		time.Sleep(time.Hour)
	case "orphan":
		cmd := exec.Command(os.Args[0], "sleep")
		cmd.Stdout = os.Stdout // the orphan holds our stdout pipe
		if err := cmd.Start(); err != nil {
			os.Exit(4)
		}
		fmt.Printf("child %d\n", cmd.Process.Pid)
		echo()
	case "sleep":
		time.Sleep(time.Minute)
	case "flood":
		buf := bytes.Repeat([]byte("f"), 64<<10)
		for {
			if _, err := os.Stdout.Write(buf); err != nil {
				os.Exit(0)
			}
		}
	case "giant":
		n, _ := strconv.Atoi(os.Args[2])
		line := bytes.Repeat([]byte("g"), n)
		line[n-1] = '\n'
		if _, err := os.Stdout.Write(line); err != nil {
			os.Exit(5)
		}
		echo()
	default:
		os.Exit(2)
	}
}

func echo() {
	buf := make([]byte, 64<<10)
	_, _ = io.CopyBuffer(os.Stdout, os.Stdin, buf)
}
