/**
 * A stdio MCP server (low-level SDK `Server`) whose tools accept any object by their schema and judge
 * the arguments at run time, as many servers in the field do: the store cannot catch the problem
 * from the schema, so the upstream's own JSON-RPC answer reaches the store.
 *
 *   strict {value}: "ok" -> text "accepted"; anything else -> JSON-RPC -32602 (invalid params)
 *   broken {}:      always JSON-RPC -32603 (internal error)
 *
 * Run it with `node --import <tsx> test/support/strict-server.ts` (see `strictServer` in server.ts).
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js"

const server = new Server({ name: "strict", version: "1.0.0" }, { capabilities: { tools: {} } })

server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    { name: "strict", description: "Accepts only value 'ok'.", inputSchema: { type: "object" } },
    { name: "broken", description: "Always fails with -32603.", inputSchema: { type: "object" } }
  ]
}))

server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const args = request.params.arguments ?? {}
  if (request.params.name === "strict") {
    if (args.value !== "ok") throw new McpError(ErrorCode.InvalidParams, `value must be "ok", got ${JSON.stringify(args.value)}`)
    return { content: [{ type: "text", text: "accepted" }] }
  }
  if (request.params.name === "broken") throw new McpError(ErrorCode.InternalError, "the tool broke")
  throw new McpError(ErrorCode.InvalidParams, `Tool ${request.params.name} not found`)
})

await server.connect(new StdioServerTransport())
