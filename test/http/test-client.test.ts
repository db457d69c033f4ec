// The tests' JSON client (test/support/client.ts) against a stand-in server over node:net: a request
// reset on a kept connection before any answer (the server closed it as the request went out) is
// sent once more on a new connection, while one whose answer had begun is not sent again.
import { createServer, type Server, type Socket } from "node:net"
import { afterEach, describe, expect, it } from "vitest"
import { api } from "../support/index.js"

const servers: Server[] = []
const sockets = new Set<Socket>()
afterEach(async () => {
  // The client's agent keeps its connections: ended here, so that the servers close at once.
  for (const socket of sockets) socket.destroy()
  sockets.clear()
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))))
})

/** A server that hands each request (its connection's count, the request's count in all) to `onRequest`. */
const standIn = async (onRequest: (socket: Socket, onConnection: number, inAll: number) => void): Promise<string> => {
  let inAll = 0
  const server = createServer((socket) => {
    sockets.add(socket)
    let onConnection = 0
    let buffered = ""
    socket.on("error", () => undefined)
    socket.on("data", (chunk) => {
      buffered += chunk.toString("latin1")
      for (let end = buffered.indexOf("\r\n\r\n"); end !== -1; end = buffered.indexOf("\r\n\r\n")) {
        buffered = buffered.slice(end + 4)
        onRequest(socket, ++onConnection, ++inAll)
      }
    })
  })
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`
}

const answer = (socket: Socket, text: string) =>
  socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nkeep-alive: timeout=30\r\ncontent-length: ${text.length}\r\n\r\n${text}`)

describe("the tests' JSON client", () => {
  it("sends a request reset on a kept connection before any answer once more, on a new connection", async () => {
    const seen: Array<[number, number]> = []
    const base = await standIn((socket, onConnection, inAll) => {
      seen.push([onConnection, inAll])
      if (onConnection === 2) return void socket.destroy()
      answer(socket, JSON.stringify({ n: inAll }))
    })
    const client = api(base)
    expect((await client.get("/one")).body).toEqual({ n: 1 })
    expect((await client.get("/two")).body).toEqual({ n: 3 })
    // The second request reached the kept connection (reset there), then a new one.
    expect(seen).toEqual([[1, 1], [2, 2], [1, 3]])
  })

  it("does not send again a request whose answer had begun", async () => {
    let requests = 0
    const base = await standIn((socket) => {
      requests += 1
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npart")
      setTimeout(() => socket.destroy(), 20)
    })
    await expect(api(base).post("/change", { x: 1 })).rejects.toThrow()
    expect(requests).toBe(1)
  })
})
