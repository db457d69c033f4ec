/**
 * The schemas the engine (session.ts) reads a tool list and an unusual tool result with: SDK v2's,
 * with the 2025 revisions' rules where v2 reads the 2026-07-28 ones. v2 takes any JSON value as
 * structured content and any object as a tool's output schema, and reads each property of a tool's
 * input schema as a JSON value (three times the cost of a list); the store relays structured content
 * as an object to every face and keeps it so in its records, and checks it against output schemas
 * of type object. With these, what the engine accepts and refuses is what it did on SDK 1.x.
 */
import { CallToolResultSchema, ListToolsResultSchema, ToolSchema } from "@modelcontextprotocol/core"
import type { JSONObject } from "@modelcontextprotocol/client"
import * as z from "zod/v4"

/** An object (a property's JSON Schema, read from JSON), checked no deeper. */
const objectValue = z.custom<JSONObject>((v) => v !== null && (typeof v === "object" || typeof v === "function"))

/** A tool's input or output schema: a JSON Schema of type object, its properties objects. */
const ObjectJsonSchema = z
  .object({
    type: z.literal("object"),
    properties: z.record(z.string(), objectValue).optional(),
    required: z.array(z.string()).optional()
  })
  .catchall(z.unknown())

/** A tools/list result. */
export const ToolsListSchema = ListToolsResultSchema.extend({
  tools: z.array(ToolSchema.extend({ inputSchema: ObjectJsonSchema, outputSchema: ObjectJsonSchema.optional() }))
})

/** A tool result, its structured content an object. */
export const ToolResultSchema = CallToolResultSchema.extend({ structuredContent: z.record(z.string(), z.unknown()).optional() })
