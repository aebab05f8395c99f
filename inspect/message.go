package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/textproto"
	"regexp"

	"github.com/nats-io/nats.go"
)

// message is what the input held: a body, and the subject and headers
// when the input was a whole message as the nats CLI prints it.
type message struct {
	subject string
	header  nats.Header
	data    []byte
}

// parseInput reads one of:
//   - a message body as it is, which is what `--translate` pipes;
//   - a message as `nats stream get`, `nats stream view` or `nats sub`
//     print it: a first line naming the subject, headers, a blank line,
//     then the body;
//   - a message as JSON: `nats stream get --json` (base64 "data" and
//     "hdrs") or one of `nats sub --dump` (base64 "Data", "Header").
func parseInput(in []byte) message {
	if m, ok := parseJSONMessage(in); ok {
		return m
	}
	if m, ok := parsePrinted(in); ok {
		return m
	}
	return message{data: in}
}

// jsonMessage covers both JSON forms: encoding/json matches "Data" and
// "data" alike.
type jsonMessage struct {
	Subject string              `json:"subject"`
	Header  map[string][]string `json:"header"`
	Hdrs    []byte              `json:"hdrs"`
	Data    []byte              `json:"data"`
}

func parseJSONMessage(in []byte) (message, bool) {
	in = bytes.TrimRight(in, "\x00 \t\r\n") // --dump - ends each message with a NUL
	var j jsonMessage
	if json.Unmarshal(in, &j) != nil || j.Subject == "" || j.Data == nil {
		return message{}, false
	}
	m := message{subject: j.Subject, header: nats.Header(j.Header), data: j.Data}
	if len(j.Hdrs) > 0 {
		m.header = parseHdrs(j.Hdrs)
	}
	return m, true
}

// parseHdrs reads a NATS header block ("NATS/1.0\r\nKey: value\r\n\r\n");
// a block it cannot read gives no headers, and the payload decides.
func parseHdrs(b []byte) nats.Header {
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	if _, err := r.ReadLine(); err != nil {
		return nil
	}
	h, err := r.ReadMIMEHeader()
	if err != nil && len(h) == 0 {
		return nil
	}
	return nats.Header(h)
}

// The first line of a message as the nats CLI prints it, and where the
// subject is in it:
//
//	Item: AERIE_RESULTS#5 received ... on Subject aerie.results.r.abc   (stream get)
//	[5] Subject: aerie.results.r.abc Received: ...                       (stream view)
//	[#1] Received JetStream message: ... subject: aerie.results.r.abc / ...  (sub --stream)
//	[#1] Received on "aerie.results.r.abc"                               (sub)
var (
	printedFirstLine = regexp.MustCompile(`^(Item: \S+#\d+ |\[\d+\] Subject: |\[#\d+\])`)
	printedSubject   = regexp.MustCompile(`(?:on Subject |Subject: |subject: |Received on ")([^\s"]+)`)
	printedHeader    = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+): (.*)$`)
)

func parsePrinted(in []byte) (message, bool) {
	first, rest, _ := bytes.Cut(in, []byte("\n"))
	if !printedFirstLine.Match(first) {
		return message{}, false
	}
	var m message
	if s := printedSubject.FindSubmatch(first); s != nil {
		m.subject = string(s[1])
	}
	for len(rest) > 0 && rest[0] == '\n' {
		rest = rest[1:]
	}
	if line, after, ok := bytes.Cut(rest, []byte("\n")); ok && string(line) == "Headers:" {
		rest = after
	}
	for {
		line, after, ok := bytes.Cut(rest, []byte("\n"))
		h := printedHeader.FindSubmatch(line)
		if !ok || h == nil {
			break
		}
		if m.header == nil {
			m.header = nats.Header{}
		}
		m.header.Add(string(h[1]), string(h[2]))
		rest = after
	}
	if m.header != nil {
		rest = bytes.TrimPrefix(rest, []byte("\n"))
	}
	m.data = rest
	return m, true
}
