/**
 * The part of SDK 1.x the MCP endpoint uses: its SSE server transport (SDK v2 has none) and the
 * message schema its POST bodies are checked with (src/http/gateway/endpoint.ts). A module of its
 * own so that endpoint.ts loads it with import() on the first GET of a legacy SSE stream: SDK 1.x's
 * types and the transport's body reader (raw-body, with iconv-lite's encoding tables) are about a
 * megabyte of JavaScript that a store's start would otherwise compile and run for nothing.
 */
export { SSEServerTransport } from "@modelcontextprotocol/sdk/server/sse.js"
export { JSONRPCMessageSchema } from "@modelcontextprotocol/sdk/types.js"
