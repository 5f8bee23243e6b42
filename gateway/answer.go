package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// Static messages of answers the gateway rewrites (see answerWriter).
const (
	msgInternalError = "gateway: internal error"
	msgRequestFailed = "gateway: request refused"
)

// ownMessages are the gateway's own error texts: an error answer that
// carries one of them passes unchanged, any other text is replaced. It is
// never written after start-up.
var ownMessages = func() map[string]bool {
	own := map[string]bool{}
	for _, m := range []string{
		msgForeignOrigin, msgLoopbackOnly, msgOtherToken, msgTokenCap, msgGlobalCap, msgClosed,
		msgUnknownTool, msgInvalidCursor, msgUnknownResource, msgUnavailable, msgFailed, msgRemote,
		msgChanged, msgRefused, msgEnded, msgCancelled, msgTimeout, msgInternal, msgCollision, msgUnknownPrompt, msgAccessDenied,
		msgBodyTimeout, msgBodyTooLarge, msgBodyUnread, msgParse, msgInvalidID, msgInvalidReq,
		msgBatch, msgNoSession, msgMethod, msgInvalidParams, msgInternalError, msgRequestFailed,
	} {
		own[m] = true
	}
	return own
}()

// staticMessage is the text an error answer of code gets when its own
// text is not the gateway's.
func staticMessage(code int64) string {
	switch code {
	case -32700:
		return msgParse
	case -32600:
		return msgInvalidReq
	case -32601:
		return msgMethod
	case -32602:
		return msgInvalidParams
	case -32603:
		return msgInternalError
	}
	return msgRequestFailed
}

// How an answerWriter treats the body of the answer under way.
const (
	bodyPass   = iota // not an error answer: written as is
	bodyPlain         // a plain-text HTTP error
	bodyJSON          // one JSON-RPC message (or a JSON error body)
	bodyStream        // server-sent events, each a JSON-RPC message
)

// answerWriter holds every answer of the gateway to what docs/gateway.md
// says of them, whoever wrote it — the gateway, the go-sdk's HTTP handler
// or its JSON-RPC layer, several of whose error paths quote the client
// (its method name, its params, its protocol version header):
//
//   - a plain-text HTTP error carries the gateway's own text or, when it
//     does not, the static text of its status;
//   - a JSON-RPC error carries the gateway's own message or the static one
//     of its code, without data; code 0 (no code) becomes internal error;
//   - a 401 says how to authenticate: WWW-Authenticate: Bearer.
//
// JSON-RPC bodies are read only where an error can be: a JSON body is
// held until it is whole, an event of a stream until its blank line; the
// messages of a stream that carry no "error" member pass unparsed.
type answerWriter struct {
	http.ResponseWriter
	mode        int
	status      int
	wroteHeader bool
	plainSeen   bool // bodyPlain: the first write was judged
	plainOwn    bool // … and it was the gateway's own text
	held        []byte
}

// WriteHeader decides how the body is treated before the status goes out.
func (a *answerWriter) WriteHeader(code int) {
	if a.wroteHeader {
		return
	}
	a.wroteHeader, a.status = true, code
	h := a.Header()
	if code == http.StatusUnauthorized && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", "Bearer")
	}
	ct := h.Get("Content-Type")
	switch {
	case code >= 400 && strings.HasPrefix(ct, "text/plain"):
		a.mode = bodyPlain
		h.Del("Content-Length")
	case strings.HasPrefix(ct, "application/json"):
		a.mode = bodyJSON
		h.Del("Content-Length")
	case strings.HasPrefix(ct, "text/event-stream"):
		a.mode = bodyStream
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	if !a.wroteHeader {
		a.WriteHeader(http.StatusOK)
	}
	switch a.mode {
	case bodyPlain:
		if !a.plainSeen {
			a.plainSeen = true
			a.plainOwn = ownMessages[strings.TrimSpace(string(b))]
			if !a.plainOwn {
				_, err := a.ResponseWriter.Write([]byte(staticHTTPText(a.status) + "\n"))
				return len(b), err
			}
		}
		if a.plainOwn {
			return a.ResponseWriter.Write(b)
		}
		return len(b), nil
	case bodyJSON:
		a.held = append(a.held, b...)
		return len(b), nil
	case bodyStream:
		// The go-sdk writes each event whole, in one call: such a write
		// without an error in it passes without a copy.
		if len(a.held) == 0 && bytes.Index(b, []byte("\n\n")) == len(b)-2 {
			if !bytes.Contains(b, []byte(`"error"`)) {
				return a.ResponseWriter.Write(b)
			}
			_, err := a.ResponseWriter.Write(staticEvent(b))
			return len(b), err
		}
		a.held = append(a.held, b...)
		return len(b), a.writeEvents()
	}
	return a.ResponseWriter.Write(b)
}

// staticHTTPText is the static text replacing a plain-text error's body:
// its status, named.
func staticHTTPText(status int) string {
	return "gateway: " + strings.ToLower(http.StatusText(status))
}

// writeEvents writes the whole events held, each error message in them
// made static, and keeps an incomplete last one.
func (a *answerWriter) writeEvents() error {
	for {
		i := bytes.Index(a.held, []byte("\n\n"))
		if i < 0 {
			return nil
		}
		event := a.held[:i+2]
		out := event
		if bytes.Contains(event, []byte(`"error"`)) {
			out = staticEvent(event)
		}
		if _, err := a.ResponseWriter.Write(out); err != nil {
			return err
		}
		a.held = a.held[i+2:]
	}
}

// staticEvent rewrites the data lines of one server-sent event.
func staticEvent(event []byte) []byte {
	lines := bytes.Split(event, []byte("\n"))
	for i, l := range lines {
		if data, ok := bytes.CutPrefix(l, []byte("data:")); ok {
			lines[i] = append([]byte("data: "), staticJSON(bytes.TrimLeft(data, " "))...)
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

// staticJSON returns a JSON-RPC message with its error, if it has one,
// made static (see answerWriter); other bodies come back unchanged.
func staticJSON(b []byte) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(b, &msg) != nil || msg["error"] == nil {
		return b
	}
	var e struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data"`
	}
	if json.Unmarshal(msg["error"], &e) == nil && e.Code != 0 && e.Data == nil && ownMessages[e.Message] {
		return b
	}
	if e.Code == 0 {
		e.Code = -32603
	}
	msg["error"], _ = json.Marshal(wireError{Code: e.Code, Message: staticMessage(e.Code)})
	out, err := json.Marshal(msg)
	if err != nil {
		return b
	}
	return out
}

// Flush writes the whole events held and flushes them.
func (a *answerWriter) Flush() {
	if a.mode == bodyStream {
		_ = a.writeEvents()
	}
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (read
// deadlines, flushes).
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// finish writes what is held once the handler returned: a JSON body made
// static, and a stream's incomplete last event as it is.
func (a *answerWriter) finish() {
	switch a.mode {
	case bodyJSON:
		if len(a.held) > 0 {
			_, _ = a.ResponseWriter.Write(staticJSON(a.held))
		}
	case bodyStream:
		_ = a.writeEvents()
		if len(a.held) > 0 {
			_, _ = a.ResponseWriter.Write(a.held)
		}
	}
	a.held = nil
}
