/**
 * A client's resources/subscribe crossing its own unsubscribe of the same URI upstream (the MCP
 * gateway's subscriptions, src/http/gateway/endpoint.ts): against an upstream that answers an
 * unsubscribe only after a while (and drops the subscription only then), a subscribe made while the
 * unsubscribe is under way is sent upstream after it, so the URI ends subscribed there and its updates
 * reach the client; its last unsubscribe ends the subscription upstream. A subscribe the upstream
 * refuses is the client's refusal, with the server's code, and leaves nothing subscribed. A flood of
 * updates is relayed as a few, the last one after it.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { addService, eventually, startTestServer, within, type TestServer } from "../support/index.js"

/** How long the upstream takes to answer an unsubscribe (ms). */
const SLOW_MS = 600

let server: TestServer
let upstream: HttpFixture
const clients: Client[] = []

beforeAll(async () => {
  upstream = await startHttpFixture({ server: { catalog: true, slowUnsubscribeMs: SLOW_MS } })
  server = await startTestServer()
  await addService(server, "/for_store", { name: "notes", url: upstream.url })
}, 60_000)

afterAll(async () => {
  await Promise.all(clients.splice(0).map((c) => within(c.close(), 3000, "client close").catch(() => undefined)))
  await server?.cleanup()
  await upstream?.stop()
})

/** A 2025 session on the store's /mcp, with the URIs of the updates it hears. */
const session = async () => {
  const client = new Client({ name: "subscription-crossing", version: "1.0.0" })
  client.onerror = () => undefined
  clients.push(client)
  const heard: string[] = []
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void heard.push(n.params.uri))
  await within(client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
  return { client, heard }
}

/** The upstream's `touch` of `uri`, through the store: "updated" when the upstream holds a subscription of it, and how many unsubscribes it answered. */
const touch = async (uri: string) => {
  const reply = await server.post("/for_store/call_tool", { tool_name: "notes__touch", args: { uri } })
  expect(reply.status, reply.text).toBe(200)
  return reply.body.result as string
}

const unsubscribes = () => upstream.requests().filter((r) => r === "POST resources/unsubscribe").length

describe("a subscribe crossing an unsubscribe of the same URI upstream", () => {
  it("is sent after the unsubscribe ends: the URI stays subscribed upstream and its updates reach the client", async () => {
    const uri = "mem://notes/1"
    const { client, heard } = await session()
    await client.subscribeResource({ uri })
    expect(await touch(uri)).toBe("updated, 0 unsubscribed")
    expect(await eventually(() => heard.length === 1, 5_000)).toBe(true)

    const before = unsubscribes()
    await client.unsubscribeResource({ uri })
    // The unsubscribe is under way upstream (answered after SLOW_MS) when the subscribe comes.
    expect(await eventually(() => unsubscribes() === before + 1, 5_000)).toBe(true)
    await client.subscribeResource({ uri })
    // Once the upstream has answered that unsubscribe, the URI is subscribed there again.
    expect(await eventually(async () => (await touch(uri)).endsWith(", 1 unsubscribed"), 10_000)).toBe(true)
    expect(await touch(uri)).toBe("updated, 1 unsubscribed")
    expect(await eventually(() => heard.length >= 2, 5_000), JSON.stringify(upstream.requests().slice(-6))).toBe(true)
    expect(unsubscribes()).toBe(before + 1)

    await client.unsubscribeResource({ uri })
    expect(await eventually(async () => (await touch(uri)) === "not subscribed, 2 unsubscribed", 10_000)).toBe(true)
  })

  it("a subscribe the upstream refuses is refused to the client with the server's code, and kept by nobody: a retry is sent upstream again", async () => {
    const uri = "mem://refused/1"
    const subscribes = () => upstream.requests().filter((r) => r === "POST resources/subscribe").length
    const { client } = await session()
    const before = subscribes()
    for (let attempt = 1; attempt <= 2; attempt++) {
      const refused = await client.subscribeResource({ uri }).then(
        () => undefined,
        (e: unknown) => e as { code?: number; message?: string }
      )
      expect(refused?.code, `attempt ${attempt}`).toBe(-32602)
      expect(refused?.message).toMatch(/no such resource/)
      expect(subscribes()).toBe(before + attempt)
    }
  })

  it("an upstream's flood of updates of one URI reaches a session as a few, the last one after the flood", async () => {
    const uri = "mem://notes/flood"
    const { client, heard } = await session()
    await client.subscribeResource({ uri })
    const touched = await Promise.all(Array.from({ length: 40 }, () => touch(uri)))
    expect(touched.every((t) => t.startsWith("updated"))).toBe(true)
    // Coalesced: at most one update every 250 ms, and one after the last of them.
    expect(await eventually(() => heard.filter((u) => u === uri).length >= 2, 5_000)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, 600))
    expect(heard.filter((u) => u === uri).length).toBeLessThanOrEqual(20)
    await client.unsubscribeResource({ uri })
  })
})
