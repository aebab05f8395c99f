// Command parquetgen writes the Parquet fixtures of package dataset with
// Apache Arrow's Go implementation, a different library from the one
// aerie reads Parquet with, so that the tests read files as another
// writer lays them out (three-level LIST groups, dictionary pages, several
// row groups).
//
// Regenerate the fixtures from this directory with
//
//	go run . ..
//
// which writes messages.parquet, conversations.parquet, bad.parquet and
// noprompt.parquet into the parent directory (dataset/testdata).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// turn is one chat turn of a messages column.
type turn struct{ role, content string }

var turnType = arrow.StructOf(
	arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "content", Type: arrow.BinaryTypes.String},
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: parquetgen DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	for name, write := range map[string]func(string) error{
		"messages.parquet":      writeMessages,
		"conversations.parquet": writeConversations,
		"bad.parquet":           writeBad,
		"noprompt.parquet":      writeNoPrompt,
	} {
		if err := write(filepath.Join(dir, name)); err != nil {
			fmt.Fprintf(os.Stderr, "parquetgen: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}

// write writes the record to path, at most rowGroup rows per row group.
func write(path string, rec arrow.Record, rowGroup int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	props := parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(rowGroup), parquet.WithDictionaryDefault(true))
	w, err := pqarrow.NewFileWriter(rec.Schema(), f, props, pqarrow.DefaultWriterProps())
	if err != nil {
		f.Close()
		return err
	}
	if err := w.Write(rec); err != nil {
		w.Close()
		return err
	}
	return w.Close() // closes f
}

// appendTurns appends a conversation to a list-of-struct builder; nil
// turns append a null list.
func appendTurns(b *array.ListBuilder, turns []turn, null bool) {
	if null {
		b.AppendNull()
		return
	}
	b.Append(true)
	sb := b.ValueBuilder().(*array.StructBuilder)
	for _, t := range turns {
		sb.Append(true)
		sb.FieldBuilder(0).(*array.StringBuilder).Append(t.role)
		sb.FieldBuilder(1).(*array.StringBuilder).Append(t.content)
	}
}

// writeMessages: id (string) and messages as a list of {role, content}
// structs, over two row groups.
func writeMessages(path string) error {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "messages", Type: arrow.ListOf(turnType)},
		{Name: "source", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	rows := []struct {
		id    string
		turns []turn
	}{
		{"m-1", []turn{{"system", "You are terse."}, {"user", "What is 2+2?"}, {"assistant", "4"}}},
		{"m-2", []turn{{"user", "Name a prime."}}},
		{"m-3", []turn{{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}}},
	}
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r.id)
		appendTurns(b.Field(1).(*array.ListBuilder), r.turns, false)
		b.Field(2).(*array.StringBuilder).Append("fixture")
	}
	rec := b.NewRecord()
	defer rec.Release()
	return write(path, rec, 2)
}

// writeConversations: id (int64), conversations as ShareGPT JSON text and
// params as JSON text (null on one row).
func writeConversations(path string) error {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "conversations", Type: arrow.BinaryTypes.String},
		{Name: "params", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{101, 102}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{
		`[{"from":"human","value":"Tell me a joke."},{"from":"gpt","value":"Why did the chicken cross the road?"}]`,
		`[{"from":"system","value":"Answer in French."},{"from":"human","value":"Good morning"}]`,
	}, nil)
	pb := b.Field(2).(*array.StringBuilder)
	pb.Append(`{"temperature":0.2,"max_tokens":64}`)
	pb.AppendNull()
	rec := b.NewRecord()
	defer rec.Release()
	return write(path, rec, 1024)
}

// writeBad: one good row, then a row without a prompt (null messages),
// one with an empty list, one repeating the first row's id, and a good
// row.
func writeBad(path string) error {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "messages", Type: arrow.ListOf(turnType), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ids := b.Field(0).(*array.StringBuilder)
	msgs := b.Field(1).(*array.ListBuilder)
	ids.Append("b-1")
	appendTurns(msgs, []turn{{"user", "q1"}}, false)
	ids.Append("b-2")
	appendTurns(msgs, nil, true)
	ids.Append("b-3")
	appendTurns(msgs, []turn{}, false)
	ids.Append("b-1")
	appendTurns(msgs, []turn{{"user", "q4"}}, false)
	ids.Append("b-5")
	appendTurns(msgs, []turn{{"user", "q5"}}, false)
	rec := b.NewRecord()
	defer rec.Release()
	return write(path, rec, 1024)
}

// writeNoPrompt: an id and a text column, but no prompt column.
func writeNoPrompt(path string) error {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "text", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("t-1")
	b.Field(1).(*array.StringBuilder).Append("some text")
	rec := b.NewRecord()
	defer rec.Release()
	return write(path, rec, 1024)
}
