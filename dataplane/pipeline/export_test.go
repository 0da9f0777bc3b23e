package pipeline

// ReplyBuffer returns the buffer r writes its errors into, for the tests
// to fill with stale bytes.
func ReplyBuffer(r *ICMP) []byte { return r.buf }
