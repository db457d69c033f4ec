// W3C trace context as the store reads and continues it (src/domain/trace-context.ts): what a
// valid `traceparent` is (lowercase hex, version 00 with exactly four fields, later versions read by
// their first four, no all-zero ids, never version ff), `tracestate` and `baggage` kept only with a
// valid parent and within their bounds, and the store's span: the caller's trace with a span of its
// own, or a new sampled trace.
import { describe, expect, it } from "vitest"
import { callSpan, readTraceContext, traceMeta, traceMetaOf } from "../../src/domain/trace-context.js"

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
const PARENT = "00f067aa0ba902b7"

describe("trace context", () => {
  it("reads a valid traceparent, with its state and baggage", () => {
    expect(readTraceContext({ traceparent: `00-${TRACE}-${PARENT}-01`, tracestate: "a=1", baggage: "k=v" })).toEqual({
      traceId: TRACE,
      spanId: PARENT,
      flags: "01",
      tracestate: "a=1",
      baggage: "k=v"
    })
    // Repeated headers arrive as a list: joined as HTTP joins them.
    expect(readTraceContext({ traceparent: `00-${TRACE}-${PARENT}-00`, tracestate: ["a=1", "b=2"] })?.tracestate).toBe("a=1,b=2")
    expect(readTraceContext({ traceparent: `01-${TRACE}-${PARENT}-01-more-fields` })?.traceId).toBe(TRACE)
  })

  it("ignores a traceparent that is not valid, and the state and baggage with it", () => {
    for (const traceparent of [
      undefined,
      42,
      "",
      `00-${TRACE.toUpperCase()}-${PARENT}-01`,
      `00-${"0".repeat(32)}-${PARENT}-01`,
      `00-${TRACE}-${"0".repeat(16)}-01`,
      `ff-${TRACE}-${PARENT}-01`,
      `00-${TRACE}-${PARENT}-01-extra`,
      `00-${TRACE}-${PARENT}`,
      `00-${TRACE}x-${PARENT}-01`
    ]) {
      expect(readTraceContext({ traceparent, tracestate: "a=1" }), String(traceparent)).toBeUndefined()
    }
  })

  it("drops a tracestate or baggage over its bound or with control characters, keeping the parent", () => {
    const parent = `00-${TRACE}-${PARENT}-01`
    expect(readTraceContext({ traceparent: parent, tracestate: "a".repeat(513) })?.tracestate).toBeUndefined()
    expect(readTraceContext({ traceparent: parent, tracestate: "a".repeat(512) })?.tracestate).toHaveLength(512)
    expect(readTraceContext({ traceparent: parent, baggage: "k=v\r\nx: y" })?.baggage).toBeUndefined()
    expect(readTraceContext({ traceparent: parent, baggage: "b".repeat(8_193) })?.baggage).toBeUndefined()
  })

  it("continues the caller's trace with a span of its own, or starts a sampled trace", () => {
    const caller = readTraceContext({ traceparent: `00-${TRACE}-${PARENT}-00`, baggage: "k=v" })
    const span = callSpan(caller)
    expect(span.traceId).toBe(TRACE)
    expect(span.spanId).toMatch(/^[0-9a-f]{16}$/)
    expect(span.spanId).not.toBe(PARENT)
    expect(traceMeta(span)).toEqual({ traceparent: `00-${TRACE}-${span.spanId}-00`, baggage: "k=v" })
    const fresh = callSpan(undefined)
    expect(fresh.traceId).toMatch(/^[0-9a-f]{32}$/)
    expect(traceMeta(fresh)).toEqual({ traceparent: `00-${fresh.traceId}-${fresh.spanId}-01` })
    // Many spans: all distinct (the random pool is refilled as it runs out).
    const ids = new Set(Array.from({ length: 2_000 }, () => callSpan(undefined).spanId))
    expect(ids.size).toBe(2_000)
    // What a forwarded call carries reads back as the same span.
    expect(traceMetaOf(traceMeta(span))).toEqual(traceMeta(span))
  })
})
