/**
 * A small MCP server to try the store with: three tools over stdio. scripts/build.mjs bundles it
 * into dist/demo-server.mjs, shipped as `mcp-store/demo-server`; mcp.example.json registers it as
 * a local service that works in a clone and in a project that installed the package:
 * `{ "command": "node", "args": ["--input-type=module", "--eval", "import 'mcp-store/demo-server'"] }`.
 * From the sources: `tsx examples/demo-server.ts` (`npm run demo-server`).
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import { z } from "zod"

const server = new McpServer({ name: "demo", version: "1.0.0" })

server.registerTool(
  "echo",
  { description: "Returns the message unchanged.", inputSchema: { message: z.string() } },
  async ({ message }) => ({ content: [{ type: "text", text: message }] })
)

server.registerTool(
  "add",
  {
    description: "Adds two numbers.",
    inputSchema: { a: z.number(), b: z.number() },
    outputSchema: { sum: z.number() }
  },
  async ({ a, b }) => ({
    content: [{ type: "text", text: String(a + b) }],
    structuredContent: { sum: a + b }
  })
)

server.registerTool(
  "get_time",
  {
    description: "The current time as ISO 8601 text: UTC, or local time in the given IANA time zone.",
    inputSchema: { timezone: z.string().optional().describe("An IANA zone such as Europe/Paris") }
  },
  async ({ timezone }) => {
    const now = new Date()
    if (timezone === undefined) return { content: [{ type: "text", text: now.toISOString() }] }
    try {
      // The Swedish locale writes dates as ISO 8601 ("2025-01-31 18:04:05").
      const local = now.toLocaleString("sv-SE", { timeZone: timezone }).replace(" ", "T")
      return { content: [{ type: "text", text: `${local} (${timezone})` }] }
    } catch {
      return { content: [{ type: "text", text: `Unknown time zone: ${timezone}` }], isError: true }
    }
  }
)

await server.connect(new StdioServerTransport())
