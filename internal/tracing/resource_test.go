package tracing

import (
	"context"
	"testing"
)

// TestResourceFromEnv: the service attributes come from Options where it
// sets them, else from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// else from the defaults.
func TestResourceFromEnv(t *testing.T) {
	tests := []struct {
		name      string
		give      Options
		env       map[string]string
		want      map[string]string
		wantNoKey string
	}{
		{name: "defaults", want: map[string]string{"service.name": DefaultServiceName}, wantNoKey: "service.namespace"},
		{name: "OTEL_SERVICE_NAME", env: map[string]string{"OTEL_SERVICE_NAME": "billing-rls"},
			want: map[string]string{"service.name": "billing-rls"}},
		{name: "OTEL_RESOURCE_ATTRIBUTES",
			env:  map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=attr-rls,service.namespace=edge,service.instance.id=pod-7"},
			want: map[string]string{"service.name": "attr-rls", "service.namespace": "edge", "service.instance.id": "pod-7"}},
		{name: "options win", give: Options{ServiceName: "rls", ServiceInstanceID: "pod-1"},
			env:  map[string]string{"OTEL_SERVICE_NAME": "billing-rls", "OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=pod-7"},
			want: map[string]string{"service.name": "rls", "service.instance.id": "pod-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", "")
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			res, err := newResource(context.Background(), tt.give)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, kv := range res.Attributes() {
				got[string(kv.Key)] = kv.Value.Emit()
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q (resource %v)", k, got[k], v, got)
				}
			}
			if got["service.instance.id"] == "" {
				t.Errorf("no service.instance.id: %v", got)
			}
			if _, ok := got[tt.wantNoKey]; tt.wantNoKey != "" && ok {
				t.Errorf("%s set: %v", tt.wantNoKey, got)
			}
		})
	}
}
