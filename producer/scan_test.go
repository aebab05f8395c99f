package producer

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/aerie-dev/aerie/schema"
)

func TestTokenOfMatchesSubjectToken(t *testing.T) {
	for _, id := range []string{"a", "p-1", "ü.*>", strings.Repeat("z", 256)} {
		tok := tokenOf(id)
		if got := schema.SubjectToken(id); got != hex.EncodeToString(tok[:]) {
			t.Errorf("tokenOf(%q) = %x, schema.SubjectToken = %s", id, tok, got)
		}
	}
}
