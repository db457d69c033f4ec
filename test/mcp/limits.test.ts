// The pieces that bound what the store reads from an upstream and how long checking it takes: the
// event-stream parser's per-event limit, the stdio line splitter, the bounded fetch of the SSE
// transport (events across chunks and line-end styles, whole bodies, error bodies), and the
// linear-time pattern engine of tool schemas (src/mcp/json-schema.ts).
import { describe, expect, it } from "vitest"
import { boundedFetch } from "../../src/mcp/bounded-fetch.js"
import { EventStreamParser, type StreamEvent } from "../../src/mcp/http-transport.js"
import { compileSchema, linearRegExp, upstreamSchemaValidator } from "../../src/mcp/json-schema.js"
import { LineSplitter } from "../../src/mcp/stdio.js"
import { MessageTooLargeError } from "../../src/mcp/types.js"

describe("EventStreamParser with a size limit", () => {
  it("passes events up to the limit, counting the UTF-8 bytes of the data (the message)", () => {
    const events: Array<StreamEvent> = []
    const parser = new EventStreamParser((e) => events.push(e), 10)
    // "é" is 2 bytes: 5 × 2 = 10, the limit exactly.
    parser.push("data: ééééé\n\n")
    parser.push(`: ${"a comment that is long but complete".repeat(3)}\n`)
    parser.push("data: 1234\ndata: 56789\n\n")
    expect(events.map((e) => e.data)).toEqual(["ééééé", "1234\n56789"])
    expect(() => parser.push("data: 12345\ndata: 67890\n")).toThrow(MessageTooLargeError)
  })

  it("passes a message of exactly the limit that arrives in pieces, and stops one byte more", () => {
    const events: Array<StreamEvent> = []
    const parser = new EventStreamParser((e) => events.push(e), 1_000)
    for (const piece of `data: ${"x".repeat(1_000)}\n\n`.match(/[\s\S]{1,7}/g)!) parser.push(piece)
    expect(events[0]!.data).toHaveLength(1_000)
    expect(() => {
      for (const piece of `data: ${"x".repeat(1_001)}`.match(/[\s\S]{1,7}/g)!) parser.push(piece)
    }).toThrow(MessageTooLargeError)
  })

  it("throws as soon as one unfinished line is over the limit, whatever its field", () => {
    const parser = new EventStreamParser(() => undefined, 1_000)
    parser.push(": never ends ")
    expect(() => {
      for (let i = 0; i < 100; i++) parser.push("x".repeat(100))
    }).toThrow(/an event of the event stream is larger than the 1000-byte message limit/)
  })

  it("counts a new event from zero after a blank line, also across chunks and CRLF", () => {
    const events: Array<StreamEvent> = []
    const parser = new EventStreamParser((e) => events.push(e), 8)
    for (let i = 0; i < 50; i++) parser.push(`data: ${i % 10}234567\r`, ), parser.push("\n\r\n")
    expect(events).toHaveLength(50)
  })
})

describe("LineSplitter", () => {
  it("splits on LF, drops a CR before it, and joins a line over chunks", () => {
    const lines = new LineSplitter(100)
    expect(lines.push(Buffer.from('{"a":1}\r\n{"b"'))).toEqual(['{"a":1}'])
    expect(lines.push(Buffer.from(":2"))).toEqual([])
    expect(lines.push(Buffer.from('}\n\n{"c":3}\n'))).toEqual(['{"b":2}', "", '{"c":3}'])
  })

  it("throws once a line is over the limit, without keeping it, and reads on after clear()", () => {
    const lines = new LineSplitter(1_000)
    lines.push(Buffer.alloc(600, "x"))
    expect(() => lines.push(Buffer.alloc(600, "x"))).toThrow(/a line on stdout is larger than the 1000-byte message limit/)
    lines.clear()
    expect(lines.push(Buffer.from("ok\n"))).toEqual(["ok"])
    // A whole line in one chunk counts too.
    expect(() => lines.push(Buffer.from(`${"y".repeat(1_001)}\n`))).toThrow(MessageTooLargeError)
  })
})

describe("boundedFetch", () => {
  /** A fetch that answers with `chunks` as the body, and reports whether the body was cancelled. */
  const fakeFetch = (chunks: ReadonlyArray<string>, init: ResponseInit & { contentType: string }) => {
    const state = { pulled: 0, cancelled: false }
    const fetch = (async () => {
      const encoder = new TextEncoder()
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          const chunk = chunks[state.pulled++]
          if (chunk === undefined) controller.close()
          else controller.enqueue(encoder.encode(chunk))
        },
        cancel() {
          state.cancelled = true
        }
      })
      return new Response(body, { ...init, headers: { "content-type": init.contentType } })
    }) as typeof globalThis.fetch
    return { fetch, state }
  }

  const run = async (chunks: ReadonlyArray<string>, contentType: string, status = 200) => {
    const { fetch, state } = fakeFetch(chunks, { status, contentType })
    const tooLarge: Array<MessageTooLargeError> = []
    const bounded = boundedFetch({ maxMessageBytes: 16, errorBodyBytes: 5, onTooLarge: (e) => tooLarge.push(e), fetch })
    const response = await bounded("http://127.0.0.1/")
    const text = await response.text().then(
      (t) => ({ ok: true as const, t }),
      (e: unknown) => ({ ok: false as const, e })
    )
    return { text, state, tooLarge }
  }

  it("passes an event stream whose events are each within the limit, with LF, CR and CRLF line ends", async () => {
    const events = ["data: 0123456789\n\n", "data: 0123456789\r\r", "data: 0123456789\r\n\r\n"]
    // Split everywhere, also between the CR and LF of a CRLF.
    const stream = events.join("").repeat(20)
    const chunks = stream.match(/[\s\S]{1,3}/g)!
    const { text, tooLarge } = await run(chunks, "text/event-stream")
    expect(text).toEqual({ ok: true, t: stream })
    expect(tooLarge).toEqual([])
  })

  it("passes an event whose data is the limit exactly, over several data lines too", async () => {
    const stream = "data: 0123456789abcdef\n\ndata: 0123456\r\ndata:01234567\r\n\r\nevent: x\ndata\ndata: 0123456789abcd\n\n"
    expect((await run([stream], "text/event-stream")).text).toEqual({ ok: true, t: stream })
    expect((await run(["data: 0123456789abcdefg\n\n"], "text/event-stream")).text.ok).toBe(false)
    expect((await run(["data: 01234567\ndata: 01234567\n\n"], "text/event-stream")).text.ok).toBe(false)
  })

  it("errors an event stream at the first event over the limit and cancels the download", async () => {
    const { text, state, tooLarge } = await run(["data: short\n\n", "data: 0123456789", "abcdef", ...Array<string>(20).fill("more")], "text/event-stream")
    expect(text.ok).toBe(false)
    expect(tooLarge).toHaveLength(1)
    expect(tooLarge[0]!.message).toMatch(/an event of the SSE stream is larger than the 16-byte message limit/)
    expect(state.cancelled).toBe(true)
    // The fourth chunk is over; the source may have been asked for one more ahead of time.
    expect(state.pulled).toBeLessThanOrEqual(5)
  })

  it("stops a line that never ends, whatever its field", async () => {
    const { text, tooLarge } = await run([": a comment", " that goes on", " and on"], "text/event-stream")
    expect(text.ok).toBe(false)
    expect(tooLarge).toHaveLength(1)
  })

  it("bounds any other answer as one message", async () => {
    expect((await run(["{}"], "application/json")).text).toEqual({ ok: true, t: "{}" })
    const big = await run(['{"a":"', "0123456789", "0123456789", '"}'], "application/json")
    expect(big.text.ok).toBe(false)
    expect(big.tooLarge[0]!.message).toMatch(/the HTTP answer/)
  })

  it("keeps only the start of an error answer", async () => {
    const { text, state, tooLarge } = await run(["Bad ", "Gateway: ", "x".repeat(100), "more"], "text/plain", 502)
    expect(text).toEqual({ ok: true, t: "Bad G" })
    expect(state.cancelled).toBe(true)
    expect(tooLarge).toEqual([])
  })
})

describe("linear-time patterns", () => {
  const schema = (pattern: string) => ({ type: "object", properties: { s: { type: "string", pattern } } })

  it("checks a catastrophic pattern at once", () => {
    const validate = compileSchema(schema("^(a+)+$"))!
    const started = performance.now()
    expect(validate({ s: `${"a".repeat(5_000)}!` })).toBe(false)
    expect(validate({ s: "a".repeat(5_000) })).toBe(true)
    expect(performance.now() - started).toBeLessThan(500)
  })

  it("keeps the patterns of one schema apart (each has its own key)", () => {
    const validate = compileSchema({
      type: "object",
      properties: { a: { type: "string", pattern: "^a+$" }, b: { type: "string", pattern: "^b+$" } },
      patternProperties: { "^x-\\d+$": { type: "number" } }
    })!
    expect(validate({ a: "aaa", b: "bbb", "x-1": 1 })).toBe(true)
    expect(validate({ a: "aaa", b: "aaa" })).toBe(false)
    expect(validate({ a: "bbb", b: "bbb" })).toBe(false)
    expect(validate({ "x-1": "not a number" })).toBe(false)
  })

  it("reads ECMAScript syntax (\\u escapes, named groups, \\/) and skips what RE2 cannot run", () => {
    expect(compileSchema(schema("^\\u0041\\u{1F600}$"))!({ s: "A😀" })).toBe(true)
    expect(compileSchema(schema("^(?<y>\\d{4})\\/$"))!({ s: "2026/" })).toBe(true)
    // A backreference, a lookahead, an invalid pattern: not checked, the rest of the schema is.
    for (const pattern of ["^(a)\\1$", "^(?=a)", "[", "a{2000}"]) {
      const validate = compileSchema({ ...schema(pattern), required: ["s"] })
      expect(validate, pattern).not.toBeNull()
      expect(validate!({ s: "anything" }), pattern).toBe(true)
      expect(validate!({}), pattern).toBe(false)
    }
    expect(String(linearRegExp("(a)\\1", "u"))).toMatch(/not checked/)
  })

  it("the SDK client's validator: same engine, draft 2020-12 too, and a schema it cannot compile accepts", () => {
    const check = upstreamSchemaValidator.getValidator<{ s: string }>({ $schema: "https://json-schema.org/draft/2020-12/schema", ...schema("^(a+)+$") })
    expect(check({ s: `${"a".repeat(40)}!` })).toMatchObject({ valid: false })
    expect(check({ s: "aa" })).toMatchObject({ valid: true })
    const broken = upstreamSchemaValidator.getValidator({ type: "object", properties: { s: { $ref: "#/nowhere" } } })
    expect(broken({ s: 1 })).toMatchObject({ valid: true })
  })

  it("two schemas with the same $id compile side by side", () => {
    const one = compileSchema({ $id: "https://example.com/tool", type: "object", required: ["a"] })!
    const two = compileSchema({ $id: "https://example.com/tool", type: "object", required: ["b"] })!
    expect(one({ a: 1 })).toBe(true)
    expect(two({ a: 1 })).toBe(false)
  })
})
