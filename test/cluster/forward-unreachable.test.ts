/**
 * A forwarded request to a replica whose host does not answer at all (src/cluster/forward.ts,
 * `CONNECT_MS`): the connect is neither made nor refused, and without a bound it waited out the
 * request's whole time-out. The black hole is real (`blackHole`: a listener that never accepts, its
 * accept queue full, so Linux drops further SYNs; checked to hang a plain connect first). The
 * request counts as not delivered past the bound and goes to the next owner (a stand-in replica),
 * with one log line for the replica however many requests met it; a keep-alive socket already
 * connected is not bounded.
 */
import { afterEach, describe, expect, it } from "vitest"
import { Forwarder } from "../../src/cluster/forward.js"
import { captureLogs } from "../../src/logging/log.js"
import { blackHole, eventually, standInReplica, within } from "../support/index.js"

const SECRET = "0123456789abcdef0123456789abcdef"
const stops: Array<() => void> = []
afterEach(() => {
  for (const stop of stops.splice(0).reverse()) stop()
})

/** A stand-in replica answering each forwarded call `{"r": {"by": "live", tool}}` after `delayMs`. */
const liveReplica = async (delayMs = 0) => {
  const replica = await standInReplica((request, res) => {
    const tool = request.op === "call" ? request.tool : request.op
    setTimeout(() => res.end(`${JSON.stringify({ r: { by: "live", tool } })}\n`), delayMs)
  })
  stops.push(() => replica.close())
  return replica
}

const call = (tool: string) => ({ op: "call", field: "store/fx", tool, args: {}, timeoutMs: 60_000 }) as const

describe("a forwarded request to a replica whose host does not answer", () => {
  it("is not delivered past the connect bound and goes to the next owner; the replica is logged once", async () => {
    const [hole, live] = await Promise.all([blackHole((close) => stops.push(close)), liveReplica()])
    const asked: Array<boolean> = []
    // The first try goes to the black hole (the owner of the last view), a retry to the live replica (the lease's holder).
    const forwarder = new Forwarder(
      {
        cluster: "test",
        secret: SECRET,
        maxAnswerBytes: 1 << 20,
        ownerUrl: async (_field, again) => {
          asked.push(again)
          return again ? live.url : hole.url
        }
      },
      1_000
    )
    stops.push(() => forwarder.close())
    const logs = captureLogs({ level: "info" })
    stops.push(() => logs.restore())
    // Two at once, each meeting the black hole on a socket of its own; a call's 60 s time-out was what ended them.
    const answers = await within(Promise.all([forwarder.send(call("one"), {}), forwarder.send(call("two"), {})]), 8_000, "the calls sent on to the live replica")
    expect(answers).toEqual([
      { by: "live", tool: "one" },
      { by: "live", tool: "two" }
    ])
    expect(asked.filter((again) => !again)).toHaveLength(2)
    expect(live.received.map((r) => (r.op === "call" ? r.tool : r.op)).sort()).toEqual(["one", "two"])
    const unreachable = logs.lines.filter((line) => line.includes(`the replica at ${hole.url} made no connection`))
    expect(unreachable).toHaveLength(1)
    // The sockets that waited on the black hole are gone, not left connecting.
    expect(await eventually(() => hole.connecting() === 0, 5_000)).toBe(true)
  })

  it("does not bound an answer slower than the connect bound, on a new or a reused keep-alive socket", async () => {
    const live = await liveReplica(700)
    const forwarder = new Forwarder({ cluster: "test", secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => live.url }, 300)
    stops.push(() => forwarder.close())
    expect(await within(forwarder.send(call("first"), {}), 10_000, "the call on a new socket")).toEqual({ by: "live", tool: "first" })
    expect(await within(forwarder.send(call("second"), {}), 10_000, "the call on the reused socket")).toEqual({ by: "live", tool: "second" })
    // Both went over one connection, each answered once: the second rode the kept-alive socket.
    expect(live.connections()).toBe(1)
    expect(live.received).toHaveLength(2)
  })
})
