// Command testserver is a small MCP server on the official go-sdk that the
// runtime tests run (under the guardian) for the fault cases
// @modelcontextprotocol/server-everything cannot produce: a slow tool, a
// tool that crashes the process, a schema that changes with configuration,
// a process that ignores SIGTERM and stdin EOF, and a server-side record of
// every tools/call (and resources/read) it received so a test can prove
// that none arrived, or wait until one did.
//
// Configuration (flags, or the environment so a config change alone can
// change behaviour):
//
//	-variant / TESTSERVER_VARIANT      changes the echo tool's input schema (and so its digest)
//	-calls / TESTSERVER_CALLS          file; one line "<tool>" is appended (and synced) per tools/call received
//	-starts / TESTSERVER_STARTS        file; one line "<pid>" is appended per process start
//	-ignore-term / TESTSERVER_IGNORE_TERM=1  ignore SIGTERM
//	-ignore-eof / TESTSERVER_IGNORE_EOF=1    keep running after stdin EOF (until killed)
//	-stderr-bytes / TESTSERVER_STDERR_BYTES  writes that many bytes of numbered stderr lines at start
//	TESTSERVER_CANCELS                 file; one line "<request id>" is appended per notifications/cancelled received
//	TESTSERVER_READS                   file; one line "<uri>" is appended (and synced) per resources/read received,
//	                                   before its handler runs, so a test can wait until a read reached the server
//	TESTSERVER_LIST_PROGRESS=n         resources/list and resources/templates/list send n progress notifications
//	                                   (1..n of n) first when the request carries a progress token
//	TESTSERVER_LIST_EMPTY=1            resources/list and resources/templates/list answer with an empty list
//	TESTSERVER_SUBS                    file; one line "sub <uri>" or "unsub <uri>" is appended (and synced) per
//	                                   resources/subscribe or resources/unsubscribe received, before it is answered
//	TESTSERVER_MODE=mrtr               a raw JSON-RPC server (resources.go) whose reads answer with an MRTR
//	                                   input_required continuation, which the go-sdk server side cannot
//	                                   produce for a 2025-11-25 client
//
// Tool progress: sends its "n" argument's worth of progress notifications
// (with server text) when the call carries a progress token, and answers
// "sent <count>".
//
// TESTSERVER_PEER=1 adds the tools of the server→client tests (package
// peertools): sample, elicit, roots, log, mutable, change, touch, logcancel.
//
// Resources (resources.go): test://item/0..4 and three templates, listed two
// per page; test://text, test://blob, test://slow (held until cancelled,
// then recorded), test://progress (three progress notifications first).
//
// Prompts, completions and subscriptions (prompts.go): prompts p0..p2,
// greet, meta (echoes the request's _meta), slow; completions of greet's
// argument; resources/subscribe and resources/unsubscribe recorded in
// TESTSERVER_SUBS (any uri).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/leaseledger/leaseledger/runtime/internal/peertools"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	variant := flag.String("variant", os.Getenv("TESTSERVER_VARIANT"), "schema variant of the echo tool")
	calls := flag.String("calls", os.Getenv("TESTSERVER_CALLS"), "file recording every tools/call received")
	starts := flag.String("starts", os.Getenv("TESTSERVER_STARTS"), "file recording every process start")
	ignoreTerm := flag.Bool("ignore-term", os.Getenv("TESTSERVER_IGNORE_TERM") == "1", "ignore SIGTERM")
	ignoreEOF := flag.Bool("ignore-eof", os.Getenv("TESTSERVER_IGNORE_EOF") == "1", "keep running after stdin EOF")
	stderrBytes, _ := strconv.Atoi(os.Getenv("TESTSERVER_STDERR_BYTES"))
	flag.IntVar(&stderrBytes, "stderr-bytes", stderrBytes, "bytes of stderr lines written at start")
	flag.Parse()
	writeStderr(stderrBytes)

	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	if *starts != "" {
		if err := appendLine(*starts, strconv.Itoa(os.Getpid())); err != nil {
			fmt.Fprintln(os.Stderr, "testserver:", err)
			os.Exit(2)
		}
	}
	if os.Getenv("TESTSERVER_MODE") == "mrtr" {
		runMRTR(os.Stdin, os.Stdout, os.Getenv("TESTSERVER_CANCELS"))
		return
	}
	s := newServer(*variant, *calls)
	err := s.Run(context.Background(), &mcp.StdioTransport{})
	if *ignoreEOF {
		for { // only a signal (KILL, or TERM unless ignored) ends us
			time.Sleep(time.Hour) // a timer, so the runtime sees no deadlock
		}
	}
	if err != nil {
		os.Exit(1)
	}
}

// writeStderr writes n bytes of stderr: numbered lines of 100 bytes (the
// last one cut short), so a reader can tell which lines it kept.
func writeStderr(n int) {
	for i := 0; n > 0; i++ {
		line := fmt.Sprintf("%09d %089d\n", i, 0)
		if len(line) > n {
			line = line[:n]
		}
		os.Stderr.WriteString(line)
		n -= len(line)
	}
}

// listMiddleware serves a resource listing: n progress notifications
// first when the request carries a progress token, then the listing (an
// empty one when empty).
func listMiddleware(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler, n int, empty bool) (mcp.Result, error) {
	if p, ok := req.GetParams().(mcp.RequestParams); ok && n > 0 {
		if tok := p.GetProgressToken(); tok != nil {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
				for i := 1; i <= n; i++ {
					_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
						Progress: float64(i), Total: float64(n), Message: "list step " + strconv.Itoa(i)})
				}
			}
		}
	}
	switch {
	case !empty:
		return next(ctx, method, req)
	case method == "resources/list":
		return &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}, nil
	default:
		return &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}, nil
	}
}

// callLog serializes appends to the calls file.
var callLog sync.Mutex

func appendLine(path, line string) error {
	callLog.Lock()
	defer callLog.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newServer(variant, calls string) *mcp.Server {
	opts := &mcp.ServerOptions{PageSize: 2}
	promptOptions(opts) // prompts.go
	s := mcp.NewServer(&mcp.Implementation{Name: "leaseledger-testserver", Version: "0.1.0"}, opts)
	cancels := os.Getenv("TESTSERVER_CANCELS")
	reads := os.Getenv("TESTSERVER_READS")
	listProgress, _ := strconv.Atoi(os.Getenv("TESTSERVER_LIST_PROGRESS"))
	listEmpty := os.Getenv("TESTSERVER_LIST_EMPTY") == "1"
	// Record tools/call (and resources/read) before any handler runs, so
	// "the server never saw tools/call" is checked on the receiving side,
	// not inferred, and "the read reached the server" can be awaited.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "notifications/cancelled" && cancels != "" {
				if p, ok := req.GetParams().(*mcp.CancelledParams); ok {
					_ = appendLine(cancels, fmt.Sprint(p.RequestID))
				}
			}
			if method == "tools/call" && calls != "" {
				name := "?"
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
					name = p.Name
				}
				if err := appendLine(calls, name); err != nil {
					return nil, err
				}
			}
			if method == "resources/read" && reads != "" {
				uri := "?"
				if p, ok := req.GetParams().(*mcp.ReadResourceParams); ok {
					uri = p.URI
				}
				if err := appendLine(reads, uri); err != nil {
					return nil, err
				}
			}
			if method == "resources/list" || method == "resources/templates/list" {
				return listMiddleware(ctx, method, req, next, listProgress, listEmpty)
			}
			return next(ctx, method, req)
		}
	})

	echoSchema := `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`
	if variant != "" {
		echoSchema = `{"type":"object","properties":{"text":{"type":"string"},"variant_` + strconv.Quote(variant)[1:len(strconv.Quote(variant))-1] + `":{"type":"integer"}},"required":["text"]}`
	}
	// echo and slow say they are read-only (access policy tests decide by
	// the hint); the other tools leave their annotations out.
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	s.AddTool(&mcp.Tool{Name: "echo", Description: "echoes text", InputSchema: json.RawMessage(echoSchema), Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "slow", Description: "sleeps ms milliseconds, ignoring cancellation",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer"}}}`), Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ MS int }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			// Deliberately ignores ctx: a call past the gate runs to its end.
			time.Sleep(time.Duration(in.MS) * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept " + strconv.Itoa(in.MS)}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "crash", Description: "exits the process with status 3",
		InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "refuse", Description: "answers with a JSON-RPC error response (invalid params) with server text",
		InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "SECRET provider text"}
		})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "returns a tool error with server text",
		InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "SECRET provider text"}}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "progress", Description: "sends n progress notifications (with server text) when the call has a progress token, then answers",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ N int }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			sent := 0
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= in.N; i++ {
					if req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
						Progress: float64(i), Total: float64(in.N), Message: "SECRET provider text " + strconv.Itoa(i)}) == nil {
						sent++
					}
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent " + strconv.Itoa(sent)}}}, nil
		})
	addResources(s)
	if os.Getenv("TESTSERVER_PEER") == "1" {
		peertools.Add(s) // sampling, elicitation, roots, log, list changes
	}
	addPrompts(s)
	return s
}
