/**
 * The store's spans, as the call pipeline and the faces hand them over: a finished span with the
 * ids the store gave it (the same ids its records, answers, `/events` and log lines carry, and the
 * upstream is sent), one call per span. With tracing off (the default) the tracer is `noTracer`:
 * its `enabled` is false, so the callers build nothing and the OpenTelemetry SDK is never loaded;
 * with `--otlp-endpoint` it is the exporter of src/logging/otlp.ts, loaded by a dynamic import
 * (the Tracing layer, src/runtime/store-layers.ts).
 */
import { FiberRef } from "effect"
import type { TraceContext } from "../domain/trace-context.js"

/** The OpenTelemetry span kinds the store makes. */
export type SpanKind = "server" | "client" | "internal"

/** A span's attributes (an undefined value is left out). */
export type SpanAttributes = Readonly<Record<string, string | number | boolean | undefined>>

/** One finished span of the store. */
export interface FinishedSpan {
  /** Low cardinality: `POST /for_store/call_tool`, `tools/call add`, `wait demo`. */
  readonly name: string
  readonly kind: SpanKind
  /** Its trace, its own span id, its parent's (absent: the trace's first span), flags and state. */
  readonly context: TraceContext
  /** Whether the parent is the caller's span (another process), not one of the store's. */
  readonly remoteParent?: boolean | undefined
  /** `performance.now()` at its start and its end. */
  readonly startMs: number
  readonly endMs: number
  readonly attributes: SpanAttributes
  /** Set when it failed: the status description (its `error.type` is among the attributes). */
  readonly error?: string | undefined
}

/** Where the store's spans go. */
export interface Tracer {
  /** False: nothing is exported, so nothing should be built. */
  readonly enabled: boolean
  /** Hands a finished span over (queued for export, never waiting on the collector). */
  record(span: FinishedSpan): void
  /** Exports what is queued (for a bounded time) and stops. */
  shutdown(): Promise<void>
}

/** Tracing off: nothing is recorded. */
export const noTracer: Tracer = { enabled: false, record: () => undefined, shutdown: () => Promise.resolve() }

/** Where spans are exported: OTLP/HTTP to `url` (the exporter reads the standard environment when it is undefined). */
export interface TracingOptions {
  /** The traces URL (`--otlp-traces-endpoint`, else `<--otlp-endpoint>/v1/traces`). */
  readonly url?: string | undefined
  /** `service.version` of the resource. */
  readonly serviceVersion?: string | undefined
}

/**
 * The span of the request an Effect handler serves (set by the server's measuring middleware, only
 * when tracing is on): the parent of the spans the handler's operations make (a wait_service's wait).
 */
export const requestSpan = FiberRef.unsafeMake<TraceContext | undefined>(undefined)
