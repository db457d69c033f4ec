/**
 * What two mechanics of forwarding cost (src/cluster/forward.ts, src/http/cluster-route.ts), each an
 * A/B in one run on loopback, in this one process (server and client), the same requests through
 * each side in alternating rounds (A then B, B then A), the process's CPU time per request summed
 * over each side's rounds. Both sides run the forwarder's request shape: a POST of a small JSON body,
 * its answer read whole.
 *
 * - `agent-timeout`: the forwarding agents' `timeout` (`new Agent({ keepAlive: true, maxSockets:
 *   256, timeout })`). With a time-out of its own, Node's agent sets each kept socket's idle timer
 *   from the server's `Keep-Alive: timeout=N` hint and re-arms it as the socket is taken and freed;
 *   without one it does neither. One server, two agents differing only in `timeout`.
 * - `early-head`: the owner sends the answer's head as soon as it takes a forwarded request
 *   (`flushHeaders`), the body when the call ends: two writes instead of one. Two servers differing
 *   only in that, one agent (with the time-out) each.
 *
 *   npx tsx bench/forward-mechanics.ts agent-timeout|early-head [--c 1] [--rounds 30] [--requests 2000]
 */
import { Agent, createServer, request } from "node:http"
import type { AddressInfo } from "node:net"
import { parseArgs } from "node:util"

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { c: { type: "string", default: "1" }, rounds: { type: "string", default: "30" }, requests: { type: "string", default: "2000" } }
})
const which = positionals[0]
if (which !== "agent-timeout" && which !== "early-head") throw new Error("usage: forward-mechanics.ts agent-timeout|early-head [--c N] [--rounds N] [--requests N]")
const concurrency = Number(values.c)
const rounds = Number(values.rounds)
const perRound = Number(values.requests)

const body = JSON.stringify({ tool_name: "echo", args: { text: "hi" } })
/** A server answering the request once it is read; with `early`, its head goes out as the request is taken. */
const serve = async (early: boolean): Promise<{ readonly port: number; close(): void }> => {
  const server = createServer((req, res) => {
    if (early) {
      res.writeHead(200, { "content-type": "application/json" })
      res.flushHeaders()
    }
    req.resume()
    req.on("end", () => (early ? res.end('{"success":true}') : res.writeHead(200, { "content-type": "application/json" }).end('{"success":true}')))
  })
  // Node's default server hint, as the owner's: `Keep-Alive: timeout=5`.
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return { port: (server.address() as AddressInfo).port, close: () => server.close() }
}

const forwarding = () => new Agent({ keepAlive: true, maxSockets: 256, timeout: 60_000 })
const late = await serve(false)
const early = which === "early-head" ? await serve(true) : late
/** Each side: its agent and the server it asks. */
const sides = {
  A: { agent: which === "agent-timeout" ? new Agent({ keepAlive: true, maxSockets: 256 }) : forwarding(), port: late.port },
  B: { agent: forwarding(), port: early.port }
} as const

const once = ({ agent, port }: { readonly agent: Agent; readonly port: number }) =>
  new Promise<void>((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path: "/", method: "POST", agent, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume()
      res.on("end", resolve)
    })
    req.on("error", reject)
    req.end(body)
  })

/** `perRound` requests of one side, `concurrency` at a time: this process's CPU time (µs). */
const round = async (side: (typeof sides)[keyof typeof sides]): Promise<number> => {
  const before = process.cpuUsage()
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < perRound) await once(side)
    })
  )
  const used = process.cpuUsage(before)
  return used.user + used.system
}

// Warm-up: both sides, their sockets opened and the code compiled.
await round(sides.A)
await round(sides.B)
const totals = { A: 0, B: 0 }
const ratios: number[] = []
for (let i = 0; i < rounds; i++) {
  const order = i % 2 === 0 ? (["A", "B"] as const) : (["B", "A"] as const)
  const spent = { A: 0, B: 0 }
  for (const side of order) spent[side] = await round(sides[side])
  totals.A += spent.A
  totals.B += spent.B
  ratios.push(spent.B / spent.A)
}
const logs = ratios.map(Math.log)
const mean = logs.reduce((a, b) => a + b, 0) / logs.length
const sd = Math.sqrt(logs.reduce((a, b) => a + (b - mean) ** 2, 0) / (logs.length - 1))
const half = (1.96 * sd) / Math.sqrt(logs.length)
const perRequest = (us: number) => (us / (rounds * perRound)).toFixed(1)
const named = which === "agent-timeout" ? ["no agent time-out", "agent time-out 60 s"] : ["head with the answer", "head at once"]
console.log(
  `${which}, c=${concurrency}: ${rounds} rounds of ${perRound} requests per side; A (${named[0]}) ${perRequest(totals.A)} µs/request, B (${named[1]}) ${perRequest(totals.B)} µs/request: ` +
    `B/A ${(totals.B / totals.A).toFixed(3)} (geometric mean of round ratios ${Math.exp(mean).toFixed(3)}, 95 % CI ${Math.exp(mean - half).toFixed(3)} to ${Math.exp(mean + half).toFixed(3)})`
)
for (const side of Object.values(sides)) side.agent.destroy()
late.close()
early.close()
