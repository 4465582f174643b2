package msgr2

import "strconv"

// Tag identifies the kind of a frame (ceph::msgr::v2::Tag). It is the
// first byte of every preamble.
type Tag uint8

// Frame tags. Wire constants; append only.
const (
	TagHello                Tag = 1
	TagAuthRequest          Tag = 2
	TagAuthBadMethod        Tag = 3
	TagAuthReplyMore        Tag = 4
	TagAuthRequestMore      Tag = 5
	TagAuthDone             Tag = 6
	TagAuthSignature        Tag = 7
	TagClientIdent          Tag = 8
	TagServerIdent          Tag = 9
	TagIdentMissingFeatures Tag = 10
	TagSessionReconnect     Tag = 11
	TagSessionReset         Tag = 12
	TagSessionRetry         Tag = 13
	TagSessionRetryGlobal   Tag = 14
	TagSessionReconnectOK   Tag = 15
	TagWait                 Tag = 16
	TagMessage              Tag = 17
	TagKeepalive2           Tag = 18
	TagKeepalive2Ack        Tag = 19
	TagAck                  Tag = 20
	TagCompressionRequest   Tag = 21 // Quincy and later; ferry does not negotiate compression
	TagCompressionDone      Tag = 22 // Quincy and later; ferry does not negotiate compression
)

var tagNames = [...]string{
	TagHello:                "HELLO",
	TagAuthRequest:          "AUTH_REQUEST",
	TagAuthBadMethod:        "AUTH_BAD_METHOD",
	TagAuthReplyMore:        "AUTH_REPLY_MORE",
	TagAuthRequestMore:      "AUTH_REQUEST_MORE",
	TagAuthDone:             "AUTH_DONE",
	TagAuthSignature:        "AUTH_SIGNATURE",
	TagClientIdent:          "CLIENT_IDENT",
	TagServerIdent:          "SERVER_IDENT",
	TagIdentMissingFeatures: "IDENT_MISSING_FEATURES",
	TagSessionReconnect:     "SESSION_RECONNECT",
	TagSessionReset:         "SESSION_RESET",
	TagSessionRetry:         "SESSION_RETRY",
	TagSessionRetryGlobal:   "SESSION_RETRY_GLOBAL",
	TagSessionReconnectOK:   "SESSION_RECONNECT_OK",
	TagWait:                 "WAIT",
	TagMessage:              "MESSAGE",
	TagKeepalive2:           "KEEPALIVE2",
	TagKeepalive2Ack:        "KEEPALIVE2_ACK",
	TagAck:                  "ACK",
	TagCompressionRequest:   "COMPRESSION_REQUEST",
	TagCompressionDone:      "COMPRESSION_DONE",
}

// String returns Ceph's name for t ("HELLO", "MESSAGE", ...), or "TAG(n)"
// for a value this package does not know.
func (t Tag) String() string {
	if t.Known() {
		return tagNames[t]
	}
	return "TAG(" + strconv.Itoa(int(t)) + ")"
}

// Known reports whether t is one of the tags above (1 through 22). The
// compression tags are known, so they parse, but ferry never negotiates
// compression and treats them as unexpected.
func (t Tag) Known() bool { return t >= TagHello && t <= TagCompressionDone }
