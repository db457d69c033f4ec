// The engine's bound on a server's own requests (src/mcp/session.ts `serve`), on an in-process
// transport whose writes are held (a unit test: a real pipe's writes complete as soon as they reach
// its buffer, and a flood reaches the store in reads of whatever size the pipe gives): at most 256
// are handled at once, however many reads they come in; the rest are dropped unanswered, reported
// at the first drop and then at most once a minute with the count dropped since; once answers are
// written, requests are handled again.
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"
import { afterEach, describe, expect, it, vi } from "vitest"
import { FLOOD_REPORT_MS, RequestFloodError, Session } from "../../src/mcp/session.js"
import { upstreamSchemaValidator } from "../../src/mcp/json-schema.js"

/** A transport whose writes complete only when `release` is called. */
class HeldTransport implements Transport {
  onmessage?: (message: JSONRPCMessage) => void
  onclose?: () => void
  onerror?: (error: Error) => void
  readonly answered: Array<unknown> = []
  private held: Array<() => void> = []
  async start(): Promise<void> {}
  async close(): Promise<void> {
    this.onclose?.()
  }
  send(message: JSONRPCMessage): Promise<void> {
    this.answered.push((message as { id?: unknown }).id)
    return new Promise((resolve) => this.held.push(resolve))
  }
  release(): void {
    for (const resolve of this.held.splice(0)) resolve()
  }
  /** The server's pings `from` to `to` (exclusive), read in one turn. */
  ping(from: number, to: number): void {
    for (let i = from; i < to; i++) this.onmessage?.({ jsonrpc: "2.0", id: `p-${i}`, method: "ping" } as JSONRPCMessage)
  }
}

/** Lets the handled requests' answers reach the transport. */
const turn = () => new Promise((resolve) => setImmediate(resolve))

afterEach(() => {
  vi.useRealTimers()
})

describe("a flood of the server's requests", () => {
  it("at most 256 are handled at once across reads; the rest are dropped, reported once a minute at most; handled again once answers are written", async () => {
    // The report's clock only (performance.now): the turns below stay real.
    vi.useFakeTimers({ toFake: ["performance"] })
    const transport = new HeldTransport()
    const reports: Array<Error> = []
    const session = new Session(transport, { clientInfo: { name: "t", version: "1" }, validator: upstreamSchemaValidator }, { onNotification: () => {}, onError: (e) => reports.push(e), onClose: () => {} })
    await session.start()
    // 1,000 in one read, then 500 in a later one while the first answers are still being written.
    transport.ping(0, 1_000)
    await turn()
    transport.ping(1_000, 1_500)
    await turn()
    expect(transport.answered).toHaveLength(256)
    expect(transport.answered).toEqual(Array.from({ length: 256 }, (_, i) => `p-${i}`))
    expect(reports).toHaveLength(1)
    expect(reports[0]).toBeInstanceOf(RequestFloodError)
    expect(reports[0]!.message).toMatch(/more than 256 requests that are not answered yet/)
    // The answers are written: the next requests are handled again; a new flood within the minute makes no line.
    transport.release()
    await turn()
    transport.ping(2_000, 2_300)
    await turn()
    expect(transport.answered).toHaveLength(512)
    expect(transport.answered.slice(256)).toEqual(Array.from({ length: 256 }, (_, i) => `p-${2_000 + i}`))
    expect(reports).toHaveLength(1)
    // A minute after the first report, the next drop is reported with the count dropped since
    // (743 + 500 + 44: every drop but the one that was reported).
    vi.advanceTimersByTime(FLOOD_REPORT_MS)
    transport.ping(3_000, 3_001)
    await turn()
    expect(reports).toHaveLength(2)
    expect(reports[1]!.message).toMatch(/\(1287 dropped since the last report\)$/)
    transport.release()
    await session.close()
  })
})
