/**
 * What the forwarding agents' `timeout` costs (src/cluster/forward.ts: `new Agent({ keepAlive: true,
 * maxSockets: 256, timeout })`): with a time-out of its own, Node's agent sets each kept socket's
 * idle timer from the server's `Keep-Alive: timeout=N` hint and re-arms it as the socket is taken
 * and freed; without one it does neither. An A/B in one run: one loopback keep-alive server, two
 * agents that differ only in `timeout`, the same requests through each in alternating rounds (A
 * then B, B then A), this process's CPU time per request summed over each agent's rounds (the
 * server's work is the same for both). Both run the forwarder's request shape: a POST of a small
 * JSON body, its answer read whole.
 *
 *   npx tsx bench/agent-timeout.ts [--c 1] [--rounds 30] [--requests 2000]
 */
import { Agent, createServer, request } from "node:http"
import type { AddressInfo } from "node:net"
import { parseArgs } from "node:util"

const { values } = parseArgs({ options: { c: { type: "string", default: "1" }, rounds: { type: "string", default: "30" }, requests: { type: "string", default: "2000" } } })
const concurrency = Number(values.c)
const rounds = Number(values.rounds)
const perRound = Number(values.requests)

const body = JSON.stringify({ tool_name: "echo", args: { text: "hi" } })
const server = createServer((req, res) => {
  req.resume()
  req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end('{"success":true}'))
})
// Node's default server hint, as the owner's: `Keep-Alive: timeout=5`.
await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
const { port } = server.address() as AddressInfo

const agents = {
  A: new Agent({ keepAlive: true, maxSockets: 256 }),
  B: new Agent({ keepAlive: true, maxSockets: 256, timeout: 60_000 })
} as const

const once = (agent: Agent) =>
  new Promise<void>((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path: "/", method: "POST", agent, headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume()
      res.on("end", resolve)
    })
    req.on("error", reject)
    req.end(body)
  })

/** `perRound` requests through `agent`, `concurrency` at a time: this process's CPU time (µs). */
const round = async (agent: Agent): Promise<number> => {
  const before = process.cpuUsage()
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < perRound) await once(agent)
    })
  )
  const used = process.cpuUsage(before)
  return used.user + used.system
}

// Warm-up: both agents, their sockets opened and the code compiled.
await round(agents.A)
await round(agents.B)
const totals = { A: 0, B: 0 }
const ratios: number[] = []
for (let i = 0; i < rounds; i++) {
  const order = i % 2 === 0 ? (["A", "B"] as const) : (["B", "A"] as const)
  const spent = { A: 0, B: 0 }
  for (const side of order) spent[side] = await round(agents[side])
  totals.A += spent.A
  totals.B += spent.B
  ratios.push(spent.B / spent.A)
}
const logs = ratios.map(Math.log)
const mean = logs.reduce((a, b) => a + b, 0) / logs.length
const sd = Math.sqrt(logs.reduce((a, b) => a + (b - mean) ** 2, 0) / (logs.length - 1))
const half = (1.96 * sd) / Math.sqrt(logs.length)
const perRequest = (us: number) => (us / (rounds * perRound)).toFixed(1)
console.log(
  `agent timeout, c=${concurrency}: ${rounds} rounds of ${perRound} requests per agent; A (no timeout) ${perRequest(totals.A)} µs/request, B (timeout 60 s) ${perRequest(totals.B)} µs/request: ` +
    `B/A ${(totals.B / totals.A).toFixed(3)} (geometric mean of round ratios ${Math.exp(mean).toFixed(3)}, 95 % CI ${Math.exp(mean - half).toFixed(3)} to ${Math.exp(mean + half).toFixed(3)})`
)
for (const agent of Object.values(agents)) agent.destroy()
server.close()
