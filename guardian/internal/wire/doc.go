// Package wire owns the guardian's host ⇄ helper protocol: everything both
// ends of the pipe must agree on, byte for byte, and nothing else.
//
// It defines the packet-4 frames (header layout, frame types, bounds, the
// reader and writer with their pooled data chunks), the protocol messages
// (Hello, LaunchRequest, Started, Receipt and its facts), the control codes
// and cleanup triggers, the identifier rule, and the two small OS helpers
// both processes need (signal names, pipe sizing).
//
// The host side (package guardian) and the helper process (package
// guardian/helper) both import it, so the helper binary does not link the
// host package. Like the rest of the guardian layer it imports only the
// standard library and golang.org/x/sys.
package wire
