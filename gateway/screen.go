package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultBodyReadTimeout bounds reading one POST body, from the handler's
// start to its last byte, when Options.BodyReadTimeout is zero. A client
// that stalls mid-body is answered 408 and held nothing: no session slot
// is taken before a whole, valid initialize has been read
// (MaxRequestBodyBytes bounds the same body's size).
const DefaultBodyReadTimeout = 10 * time.Second

// Refusals of the screen: static text, JSON-RPC codes as the protocol
// names them.
const (
	msgBodyTimeout   = "gateway: request body not received in time"
	msgBodyTooLarge  = "gateway: request body too large"
	msgBodyUnread    = "gateway: request body could not be read"
	msgParse         = "gateway: parse error"
	msgInvalidID     = "gateway: invalid request id"
	msgInvalidReq    = "gateway: invalid request"
	msgBatch         = "gateway: batch requests are not supported"
	msgNoSession     = "gateway: no session; send initialize first"
	msgMethod        = "gateway: method not found"
	msgInvalidParams = "gateway: invalid params"
)

// servedMethods are the client → server methods and notifications the
// gateway's MCP server has a handler for (server/discover is how a client
// of the sessionless protocol asks first; the go-sdk answers it with the
// versions offered, and the client falls back to initialize). A request for any other method
// is answered method-not-found here, before the go-sdk's own answer, which
// quotes the method name.
var servedMethods = map[string]bool{
	"initialize": true, "server/discover": true, "ping": true,
	"tools/list": true, "tools/call": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"prompts/list": true, "prompts/get": true,
	"completion/complete": true, "logging/setLevel": true,
	"notifications/initialized": true, "notifications/cancelled": true,
	"notifications/progress": true, "notifications/roots/list_changed": true,
}

// screenPost reads r's body within readTimeout and MaxRequestBodyBytes
// and checks the JSON-RPC message in it, so that what the go-sdk is handed
// is one well-formed message with an id it can echo exactly, for a method
// the gateway serves, and that a POST without a session opens one. It
// returns the body; ok false means the client has been answered.
//
// The read deadline is lifted once the body is read: the same connection's
// deadline would otherwise also end the response stream that follows.
func screenPost(w http.ResponseWriter, r *http.Request, readTimeout time.Duration) (body []byte, ok bool) {
	rc := http.NewResponseController(w)
	// Not every ResponseWriter supports deadlines (a test recorder); the
	// size bound holds either way.
	deadline := rc.SetReadDeadline(time.Now().Add(readTimeout)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBodyBytes))
	if deadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	var tooLarge *http.MaxBytesError
	var netErr interface{ Timeout() bool }
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, msgBodyTooLarge, http.StatusRequestEntityTooLarge)
		return nil, false
	case errors.As(err, &netErr) && netErr.Timeout():
		w.Header().Set("Connection", "close")
		http.Error(w, msgBodyTimeout, http.StatusRequestTimeout)
		return nil, false
	case err != nil:
		http.Error(w, msgBodyUnread, http.StatusBadRequest)
		return nil, false
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if !json.Valid(trimmed) {
		refuseRPC(w, http.StatusBadRequest, nil, -32700, msgParse)
		return nil, false
	}
	if len(trimmed) > 0 && trimmed[0] == '[' {
		refuseRPC(w, http.StatusBadRequest, nil, -32600, msgBatch)
		return nil, false
	}
	m, valid := readMessage(trimmed)
	if !valid {
		refuseRPC(w, http.StatusBadRequest, nil, -32600, msgInvalidReq)
		return nil, false
	}
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	if hasID && !validID(m.ID) {
		refuseRPC(w, http.StatusBadRequest, nil, -32600, msgInvalidID)
		return nil, false
	}
	var id json.RawMessage
	if hasID {
		id = m.ID
	}
	noSession := r.Header.Get(headerSessionID) == ""
	switch {
	case noSession && (m.Method != "initialize" && m.Method != "server/discover" || !hasID):
		refuseRPC(w, http.StatusBadRequest, id, -32600, msgNoSession)
		return nil, false
	case m.Method == "" && !hasID: // neither a request nor a response
		refuseRPC(w, http.StatusBadRequest, nil, -32600, msgInvalidReq)
		return nil, false
	case m.Method != "" && !servedMethods[m.Method] && hasID:
		refuseRPC(w, http.StatusOK, id, -32601, msgMethod)
		return nil, false
	case m.Method != "" && !servedMethods[m.Method]: // an unknown notification: nothing to answer
		w.WriteHeader(http.StatusAccepted)
		return nil, false
	case m.Method != "" && strings.HasPrefix(m.Method, "notifications/") == hasID:
		// A notification with an id, or a request without one.
		refuseRPC(w, http.StatusBadRequest, id, -32600, msgInvalidReq)
		return nil, false
	}
	return body, true
}

// rpcMessage is what the screen reads of one JSON-RPC message: its id as
// the client spelt it, and its method ("" for a response).
type rpcMessage struct {
	ID     json.RawMessage
	Method string
}

// readMessage reads one JSON-RPC message's jsonrpc, id and method members.
// The members are matched by their exact names, as the go-sdk matches them
// (encoding/json's struct decoding would also take "ID" for "id").
func readMessage(b []byte) (rpcMessage, bool) {
	var members map[string]json.RawMessage
	if json.Unmarshal(b, &members) != nil || string(members["jsonrpc"]) != `"2.0"` {
		return rpcMessage{}, false
	}
	m := rpcMessage{ID: members["id"]}
	if raw, ok := members["method"]; ok && json.Unmarshal(raw, &m.Method) != nil {
		return rpcMessage{}, false
	}
	return m, true
}

// maxIntID bounds a numeric JSON-RPC id: the go-sdk reads numbers as
// float64 before it makes them int64 ids, so only integers a float64 holds
// exactly (JavaScript's safe integers, |n| ≤ 2^53) come back unchanged.
const maxIntID = 1 << 53

// validID reports whether a JSON-RPC id is one the go-sdk carries back
// unchanged: a string, or an integer within ±maxIntID (a larger number or
// a fraction would come back as another id).
func validID(raw json.RawMessage) bool {
	switch raw[0] {
	case '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := strconv.ParseInt(string(raw), 10, 64)
		return err == nil && n >= -maxIntID && n <= maxIntID
	}
	return false
}

// refuseRPC answers a JSON-RPC error of static text, echoing the client's
// id byte for byte (null when there is none to echo).
func refuseRPC(w http.ResponseWriter, status int, id json.RawMessage, code int64, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", id, wireError{Code: code, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// wireError is a JSON-RPC error object as written on the wire.
type wireError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}
