/**
 * A forwarded request's exchange with the other replica (src/cluster/forward.ts), against a
 * stand-in for it (a plain HTTP server writing JSON lines): signs of life keep a held call's retry
 * open past its time-out while silence ends it; an upstream's request relayed from a call is put to
 * the caller's relay and its answer sent back as a request of its own, naming the call and the
 * request; a withdrawn request aborts the relay; progress lines are read and let go however many,
 * one line over the bound refused; a request cancelled before it is sent is not sent; the other
 * replica's own answer is told from an exchange cut short; a control request does not queue behind
 * long calls.
 */
import { createServer, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { answeredByReplica, Forwarder, type ForwardRequest } from "../../src/cluster/forward.js"
import { McpRequestError } from "../../src/mcp/types.js"
import { eventually, forwarderTo, standInReplica } from "../support/index.js"

const SECRET = "0123456789abcdef0123456789abcdef"

/** A stand-in replica: `answer` writes each forwarded request's lines; every request is kept. */
const standIn = async (answer: (request: ForwardRequest, response: ServerResponse) => void) => {
  const replica = await standInReplica(answer)
  const forwarder = new Forwarder({ cluster: "test", secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => replica.url })
  stops.push(() => {
    forwarder.close()
    replica.close()
  })
  return { url: replica.url, forwarder, received: replica.received }
}
/** A stand-in owner of raw HTTP (`server`, its connections the test's to shape) and a forwarder to it, both ended after the test. */
const rawOwner = async (server: Server) => {
  const { url, forwarder, stop } = await forwarderTo(server, SECRET)
  stops.push(stop)
  return { url, forwarder }
}
/** A forwarded tool call. */
const call = { op: "call", field: "store/fx", tool: "echo", args: {}, timeoutMs: 5_000 } as const
const stops: Array<() => void> = []
afterEach(() => {
  for (const stop of stops.splice(0)) stop()
})

const line = (res: ServerResponse, value: unknown) => res.write(`${JSON.stringify(value)}\n`)
const retry = { op: "held", field: "", retry: { state: "s", responses: {} }, owner: { scope: "store", owner: "o", subject: "tools/call t", keyed: true }, timeoutMs: 200 } as const

describe("forwarded answers: signs of life and relayed requests", () => {
  it("signs of life keep a held call's retry open past its time-out; silence ends it", async () => {
    const { url, forwarder } = await standIn((request, res) => {
      if ((request as { retry?: { state?: string } }).retry?.state === "silent") return
      const alive = setInterval(() => line(res, { a: 1 }), 100)
      setTimeout(() => {
        clearInterval(alive)
        res.end(`${JSON.stringify({ r: { ended: true } })}\n`)
      }, 1_500)
    })
    // At once: a time-out of 200 ms and the forwarder's 1 s margin, outlived by a line every 100 ms, and ended by silence.
    const settled: string[] = []
    const [alive, silent] = await Promise.all([
      forwarder.sendTo(url, retry, {}).finally(() => settled.push("alive")),
      forwarder.sendTo(url, { ...retry, retry: { state: "silent", responses: {} } }, {}).catch((e: unknown) => (settled.push("silent"), e))
    ])
    expect(settled).toEqual(["silent", "alive"])
    expect(alive).toEqual({ ended: true })
    expect(silent).toBeInstanceOf(McpRequestError)
    expect((silent as McpRequestError).kind).toBe("timeout")
  })

  it("puts a relayed request to the caller's relay and sends its answer back; a withdrawn one aborts the relay", async () => {
    const { url, forwarder, received } = await standIn((request, res) => {
      if (request.op !== "call") return res.end(`${JSON.stringify({ r: { taken: true } })}\n`)
      line(res, { q: { key: "1", method: "elicitation/create", params: { message: "name?" }, timeoutMs: 5_000 } })
      line(res, { q: { key: "2", method: "elicitation/create", params: { message: "withdrawn" }, timeoutMs: 5_000 } })
      setTimeout(() => line(res, { w: "2" }), 50)
      setTimeout(() => res.end(`${JSON.stringify({ r: { content: [] } })}\n`), 300)
    })
    const asked: string[] = []
    let withdrawn = false
    const result = await forwarder.sendTo(url, { op: "call", field: "store/fx", tool: "ask", args: {}, timeoutMs: 5_000, relay: true }, {
      relay: (request, { signal }) => {
        const message = String(request.params?.["message"])
        asked.push(message)
        if (message === "name?") return Promise.resolve({ action: "accept", content: { name: "Ada" } })
        return new Promise((_, reject) =>
          signal.addEventListener("abort", () => {
            withdrawn = true
            reject(signal.reason)
          })
        )
      }
    })
    expect(result).toEqual({ content: [] })
    expect(asked).toEqual(["name?", "withdrawn"])
    expect(withdrawn).toBe(true)
    // Only the request answered gets an answer, naming the call's request id and the request's key.
    const answers = received.filter((r) => r.op === "answer")
    expect(answers).toEqual([expect.objectContaining({ op: "answer", field: "store/fx", call: received[0]!.id, key: "1", answer: { result: { action: "accept", content: { name: "Ada" } } } })])
  })

  it("progress lines past the answer's bound are read and let go: a long chatty call is answered; one line over the bound is refused", async () => {
    const { url, forwarder } = await standIn((request, res) => {
      const message = "m".repeat(1_000)
      if (request.op === "call" && (request as { tool?: string }).tool === "chatty") {
        // 2,000 progress lines of 1 KB: twice the forwarder's bound in all.
        for (let i = 0; i < 2_000; i++) line(res, { p: { progress: i, message } })
        return res.end(`${JSON.stringify({ r: { content: [{ type: "text", text: "done" }] } })}\n`)
      }
      res.end(`${JSON.stringify({ r: { content: [{ type: "text", text: "x".repeat(1.5 * (1 << 20)) }] } })}\n`)
    })
    let seen = 0
    const chatty = await forwarder.sendTo(url, { op: "call", field: "store/fx", tool: "chatty", args: {}, timeoutMs: 10_000 }, { onProgress: () => void (seen += 1) })
    expect(chatty).toEqual({ content: [{ type: "text", text: "done" }] })
    expect(seen).toBe(2_000)
    const big = await forwarder.sendTo(url, { op: "call", field: "store/fx", tool: "big", args: {}, timeoutMs: 10_000 }, {}).catch((e: unknown) => e)
    expect(big).toBeInstanceOf(McpRequestError)
    expect((big as McpRequestError).message).toMatch(/a line of more than 1048576 bytes/)
  })

  it("a request cancelled before it is sent is not sent", async () => {
    const { url, forwarder, received } = await standIn((_request, res) => void res.end(`${JSON.stringify({ r: {} })}\n`))
    const cancel = new AbortController()
    cancel.abort()
    const sent = await forwarder.sendTo(url, { op: "call", field: "store/fx", tool: "echo", args: {}, timeoutMs: 5_000 }, { signal: cancel.signal }).catch((e: unknown) => e)
    expect((sent as McpRequestError).kind).toBe("aborted")
    expect(received).toHaveLength(0)
  })

  it("tells the other replica's own answer (a refusal, an error line) from an exchange cut short after the request was sent", async () => {
    const { url, forwarder } = await standIn((request, res) => {
      if ((request as { tool?: string }).tool === "failed") return void res.end(`${JSON.stringify({ e: { kind: "protocol", message: "not a scope: x", code: -32602 } })}\n`)
      res.socket?.destroy()
    })
    const failure = (to: string, tool: string) => forwarder.sendTo(to, { op: "call", field: "store/fx", tool, args: {}, timeoutMs: 5_000 }, {}).then(() => undefined, (e: unknown) => e)
    expect(answeredByReplica(await failure(url, "failed"))).toBe(true)
    const cut = await failure(url, "cut")
    expect(cut).toBeInstanceOf(McpRequestError)
    expect(answeredByReplica(cut)).toBe(false)
    // A replica that refuses the request (a signature outside its window, say): 401 before anything runs.
    const refusing = createServer((_req, res) => void res.writeHead(401, { "content-type": "application/json" }).end("{}"))
    await new Promise<void>((resolve) => refusing.listen(0, "127.0.0.1", resolve))
    stops.push(() => refusing.close())
    const refused = await failure(`http://127.0.0.1:${(refusing.address() as AddressInfo).port}`, "refused")
    expect((refused as Error).message).toMatch(/HTTP 401/)
    expect(answeredByReplica(refused)).toBe(true)
  })

  it("a control request (an answer to a held call) does not queue behind 256 long calls to the same replica", async () => {
    const held: ServerResponse[] = []
    const { url, forwarder } = await standIn((request, res) => {
      if (request.op === "call") return void held.push(res)
      res.end(`${JSON.stringify({ r: { taken: true } })}\n`)
    })
    const calls = Array.from({ length: 256 }, () => forwarder.sendTo(url, { op: "call", field: "store/fx", tool: "wait", args: {}, timeoutMs: 30_000 }, {}).catch(() => undefined))
    expect(await eventually(() => held.length === 256, 10_000)).toBe(true)
    const answered = await forwarder.sendTo(url, { op: "answer", field: "", call: "c", key: "k", answer: { result: {} }, timeoutMs: 2_000 }, {})
    expect(answered).toEqual({ taken: true })
    for (const res of held) res.end(`${JSON.stringify({ r: { content: [] } })}\n`)
    await Promise.all(calls)
  })

  it("a kept-alive connection the owner closes as idle just as a request comes: the request was not taken, and is sent again to it on a new one, Redis away or not", async () => {
    // The owner reads the second request of each connection and resets it without an answer's head,
    // as a replica closing an idle connection does when the request arrives at that moment.
    let requests = 0
    const owner = createServer((req, res) => {
      requests++
      const socket = req.socket as typeof req.socket & { served?: number }
      socket.served = (socket.served ?? 0) + 1
      req.resume()
      req.on("end", () => {
        if (socket.served === 2) return socket.destroy()
        res.writeHead(200, { "content-type": "application/x-ndjson" })
        res.end(`${JSON.stringify({ r: { n: requests } })}\n`)
      })
    })
    const { url, forwarder } = await rawOwner(owner)
    expect(await forwarder.send(call, {})).toEqual({ n: 1 })
    // On the kept-alive connection: reset before any answer, sent again on a new connection.
    expect(await forwarder.send(call, {})).toEqual({ n: 3 })
    expect(requests).toBe(3)
    // With Redis away too (an outage: no owner can be looked up again), the same owner is asked again.
    let lookups = 0
    const offline = new Forwarder({ cluster: "test", secret: SECRET, maxAnswerBytes: 1 << 20, ownerUrl: async () => (lookups++, url), redisAway: () => true })
    stops.push(() => offline.close())
    expect(await offline.send(call, {})).toEqual({ n: 4 })
    expect(await offline.send(call, {})).toEqual({ n: 6 })
    expect([requests, lookups]).toEqual([6, 2])
  })

  it("lets a kept-alive connection go before the owner's Keep-Alive time-out says it closes it", async () => {
    // The owner closes an idle connection after 4 s and says so (Keep-Alive: timeout=4): the
    // forwarder keeps it 3 s at most, so a request 3.5 s after the last goes on a new connection.
    const connections: unknown[] = []
    const owner = createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/x-ndjson" })
        res.end(`${JSON.stringify({ r: { ok: true } })}\n`)
      })
    })
    owner.keepAliveTimeout = 4_000
    owner.on("connection", (socket) => connections.push(socket))
    const { forwarder } = await rawOwner(owner)
    expect(await forwarder.send(call, {})).toEqual({ ok: true })
    // At once: the kept connection.
    expect(await forwarder.send(call, {})).toEqual({ ok: true })
    expect(connections).toHaveLength(1)
    await new Promise((resolve) => setTimeout(resolve, 3_500))
    expect(await forwarder.send(call, {})).toEqual({ ok: true })
    expect(connections).toHaveLength(2)
  })
})
