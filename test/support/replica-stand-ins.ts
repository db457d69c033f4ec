/**
 * Stand-ins for another replica, for the forwarder's tests (src/cluster/forward.ts): a forwarding
 * route that is a plain HTTP server writing the JSON lines a test gives it, a host that does
 * not answer at all (a black hole on loopback: connects to it are neither made nor refused), a
 * proxy in front of a real replica, as its advertised URL, that records what reaches it, and a
 * forwarder to a plain HTTP server a test shapes itself (`forwarderTo`).
 */
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { connect, type AddressInfo, type Socket } from "node:net"
import { Forwarder, type ForwardRequest } from "../../src/cluster/forward.js"
import { flush, quietFor, within } from "./wait.js"

/**
 * `server` listening on a free loopback port, and a forwarder of cluster "test" (signing with
 * `secret`) that sends to it: its URL, the forwarder, and `stop`, which ends both.
 */
export const forwarderTo = async (server: Server, secret: string): Promise<{ readonly url: string; readonly forwarder: Forwarder; readonly stop: () => void }> => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const forwarder = new Forwarder({ cluster: "test", secret, maxAnswerBytes: 1 << 20, ownerUrl: async () => url })
  const stop = () => {
    forwarder.close()
    server.closeAllConnections()
    server.close()
  }
  return { url, forwarder, stop }
}

/** A stand-in replica's forwarding route. */
export interface StandInReplica {
  readonly url: string
  /** Every forwarded request, in the order received. */
  readonly received: ReadonlyArray<ForwardRequest>
  /** How many connections it has taken. */
  connections(): number
  close(): void
}

/** A stand-in replica: `answer` writes the lines of each forwarded request's answer (the 200 is written). */
export const standInReplica = async (answer: (request: ForwardRequest, response: ServerResponse) => void): Promise<StandInReplica> => {
  const received: ForwardRequest[] = []
  let connections = 0
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const request = JSON.parse(Buffer.concat(chunks).toString("utf8")) as ForwardRequest
      received.push(request)
      res.writeHead(200, { "content-type": "application/x-ndjson" })
      answer(request, res)
    })
  })
  server.on("connection", () => (connections += 1))
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address()
  return {
    url: `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`,
    received,
    connections: () => connections,
    close: () => {
      server.closeAllConnections()
      server.close()
    }
  }
}

/** A proxy in front of a replica: every request it passes on, read as a forwarded request. */
export interface RecordingProxy {
  readonly url: string
  /** Every forwarded request, in the order received. */
  readonly received: ReadonlyArray<ForwardRequest>
  /** Where requests go from now on (the replica's URL, once it listens). */
  target(url: string): void
  close(): void
}

/**
 * A proxy to give a replica as its `--advertise-url` (started first, its `target` set once the
 * replica listens): the forwarded requests every replica sends to that replica, itself included,
 * pass through it and are recorded; the answers stream back as they come (the signature covers the
 * method, path and body, not the host). Requests before `target` is set are refused (502).
 */
export const recordingProxy = async (): Promise<RecordingProxy> => {
  const received: ForwardRequest[] = []
  let to: URL | undefined
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const body = Buffer.concat(chunks)
      try {
        received.push(JSON.parse(body.toString("utf8")) as ForwardRequest)
      } catch {
        // Not a forwarded request: passed on all the same.
      }
      if (to === undefined) return res.writeHead(502).end()
      const out = httpRequest(new URL(req.url ?? "/", to), { method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(res)
      })
      out.on("error", () => res.destroy())
      res.on("close", () => out.destroy())
      out.end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const address = server.address()
  return {
    url: `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`,
    received,
    target: (url) => (to = new URL(url)),
    close: () => {
      server.closeAllConnections()
      server.close()
    }
  }
}

/** A host that does not answer: connects to `url` hang. */
export interface BlackHole {
  readonly url: string
  readonly port: number
  /** The sockets of this machine still connecting (SYN-SENT) to it. */
  connecting(): number
  close(): void
}

/** Listens with a backlog of 0 and never accepts; prints its port, ends with its stdin. */
const NEVER_ACCEPTS = [
  "import socket, sys",
  "s = socket.socket()",
  "s.bind(('127.0.0.1', 0))",
  "s.listen(0)",
  "print(s.getsockname()[1], flush=True)",
  "sys.stdin.read()"
].join("\n")

/** Whether a connect to `port` is made within `ms` (read after the I/O of the turn the wait ends in), and its socket. */
const connectsWithin = async (port: number, ms: number): Promise<{ readonly made: boolean; readonly socket: Socket }> => {
  const socket = connect(port, "127.0.0.1")
  socket.on("error", () => undefined)
  let made = false
  const connected = new Promise<void>((resolve) =>
    socket.once("connect", () => {
      made = true
      resolve()
    })
  )
  await Promise.race([connected, quietFor(ms).then(flush)])
  return { made, socket }
}

/**
 * A black hole on loopback: a listener (a python3 child) that never accepts, its accept queue filled
 * with idle connections until a connect hangs, Linux dropping the SYNs of a listener whose queue is
 * full. The connect that hung is the proof it works here (then destroyed); rejects when none hangs.
 * `register` gets its `close` at once, so a failed start is cleaned up too.
 */
export const blackHole = async (register: (close: () => void) => void): Promise<BlackHole> => {
  const child = spawn("python3", ["-c", NEVER_ACCEPTS], { stdio: ["pipe", "pipe", "inherit"] })
  const filling: Socket[] = []
  const close = () => {
    for (const socket of filling) socket.destroy()
    child.stdin.end()
    child.kill()
  }
  register(close)
  const port = await within(
    new Promise<number>((resolve, reject) => {
      child.stdout.once("data", (data: Buffer) => resolve(Number(String(data).trim())))
      child.once("error", reject)
    }),
    10_000,
    "the python3 listener's port"
  )
  for (let i = 0; i < 4; i++) {
    const { made, socket } = await connectsWithin(port, 500)
    if (made) {
      filling.push(socket)
      continue
    }
    socket.destroy()
    return { url: `http://127.0.0.1:${port}`, port, connecting: () => synSentTo(port), close }
  }
  throw new Error(`every connect to port ${port} was made: no black hole on this machine`)
}

/** The sockets in SYN-SENT to `port` on 127.0.0.1 (/proc/net/tcp: remote address, state 02). */
const synSentTo = (port: number): number => {
  const remote = `0100007F:${port.toString(16).toUpperCase().padStart(4, "0")}`
  return readFileSync("/proc/net/tcp", "utf8")
    .split("\n")
    .slice(1)
    .filter((line) => {
      const fields = line.trim().split(/\s+/)
      return fields[2] === remote && fields[3] === "02"
    }).length
}
