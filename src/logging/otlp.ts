/**
 * The store's spans exported over OTLP/HTTP with the official OpenTelemetry SDK, loaded only when
 * tracing is on (the Tracing layer, src/runtime/store-layers.ts, imports this module dynamically, so
 * the bundle keeps it in a chunk of its own and a store without `--otlp-endpoint` never evaluates it).
 *
 * The spans keep the store's ids: an `IdGenerator` hands the SDK the ids the store already gave the
 * span, so the exported spans, the records, the answers and the log lines agree. The SDK's batch
 * processor holds at most `OTEL_BSP_MAX_QUEUE_SIZE` spans (2,048) and drops the rest, each export is
 * cut at the exporter's time-out (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s), and nothing waits for an
 * export: a dead or slow collector never slows or fails a call. Attribute values are cut at 512
 * characters, so a queued span stays small whatever a caller sent. The store's stop waits at most
 * 3 s for the last export; an export still waiting on a collector that never answers then holds the
 * process until the exporter's time-out (the SDK's timer of the export is not unref'd). The resource
 * is `service.name` mcp-store and the store's version, overridden by `OTEL_SERVICE_NAME` and
 * `OTEL_RESOURCE_ATTRIBUTES`.
 */
import { createTraceState, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Context } from "@opentelemetry/api"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources"
import { BasicTracerProvider, BatchSpanProcessor, type IdGenerator } from "@opentelemetry/sdk-trace-base"
import type { FinishedSpan, Tracer, TracingOptions } from "./tracing.js"

/** The longest attribute value exported (a caller's tool name or path is its text): longer ones are cut. */
const MAX_VALUE = 512

/** The longest a shutdown waits for the last export (a dead collector must not hold the store's stop). */
const SHUTDOWN_MS = 3_000

/** Hands the SDK the ids of the span being started (set just before each `startSpan`, which reads them at once). */
class StoreIds implements IdGenerator {
  traceId = ""
  spanId = ""
  generateTraceId(): string {
    return this.traceId
  }
  generateSpanId(): string {
    return this.spanId
  }
}

const KINDS = { server: SpanKind.SERVER, client: SpanKind.CLIENT, internal: SpanKind.INTERNAL } as const

/** The OTLP tracer of `options`. */
export const otlpTracer = (options: TracingOptions): Tracer => {
  const ids = new StoreIds()
  const resource = defaultResource()
    .merge(resourceFromAttributes({ "service.name": "mcp-store", ...(options.serviceVersion === undefined ? {} : { "service.version": options.serviceVersion }) }))
    .merge(detectResources({ detectors: [envDetector] }))
  const exporter = new OTLPTraceExporter(options.url === undefined ? {} : { url: options.url })
  const provider = new BasicTracerProvider({ resource, idGenerator: ids, spanProcessors: [new BatchSpanProcessor(exporter)] })
  const tracer = provider.getTracer("mcp-store", options.serviceVersion)
  let stopped: Promise<void> | undefined

  const parentOf = (span: FinishedSpan): Context => {
    const { context: c } = span
    if (c.parentSpanId === undefined) return ROOT_CONTEXT
    return trace.setSpanContext(ROOT_CONTEXT, {
      traceId: c.traceId,
      spanId: c.parentSpanId,
      traceFlags: Number.parseInt(c.flags, 16) & 1,
      isRemote: span.remoteParent === true,
      ...(c.tracestate === undefined ? {} : { traceState: createTraceState(c.tracestate) })
    })
  }

  return {
    enabled: true,
    record: (span) => {
      if (stopped !== undefined) return
      ids.traceId = span.context.traceId
      ids.spanId = span.context.spanId
      const attributes: Record<string, string | number | boolean> = {}
      for (const [key, value] of Object.entries(span.attributes)) {
        if (value !== undefined) attributes[key] = typeof value === "string" && value.length > MAX_VALUE ? value.slice(0, MAX_VALUE) : value
      }
      const started = tracer.startSpan(span.name, { kind: KINDS[span.kind], attributes, startTime: span.startMs }, parentOf(span))
      if (span.error !== undefined) started.setStatus({ code: SpanStatusCode.ERROR, message: span.error })
      started.end(span.endMs)
    },
    shutdown: () =>
      (stopped ??= new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, SHUTDOWN_MS)
        void provider
          .shutdown()
          .catch(() => undefined)
          .finally(() => {
            clearTimeout(timer)
            resolve()
          })
      }))
  }
}
