package simulator

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// servedModel is the name of the model served. It starts as
// Config.Model and changes through /admin/model, as when vLLM restarts
// with another --served-model-name. A request is checked against the
// name when it arrives and answered under that name to its end.
type servedModel struct {
	name atomic.Pointer[string]
}

func newServedModel(name string) *servedModel {
	m := new(servedModel)
	m.set(name)
	return m
}

func (m *servedModel) get() string     { return *m.name.Load() }
func (m *servedModel) set(name string) { m.name.Store(&name) }

// modelNotFound is vLLM's answer to a request naming another model, as
// OpenAIServing._check_model words it.
func modelNotFound(name string) *requestError {
	return &requestError{
		status:  http.StatusNotFound,
		param:   "model",
		message: fmt.Sprintf("The model `%s` does not exist.", name),
	}
}
