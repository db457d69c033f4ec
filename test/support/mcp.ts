/**
 * MCP as tests handle it: service definitions for the fixture servers (the store's `add_service`
 * shape, and the resolved shape `connect()` takes), request options for calls expected to succeed,
 * the text of a tool result, and the McpRequestError of a call expected to fail.
 */
import { fileURLToPath } from "node:url"
import { expect } from "vitest"
import type { ResolvedDefinition } from "../../src/domain/service-definition.js"
import { McpRequestError } from "../../src/mcp/types.js"
import { stdioFixture, type Launch } from "../fixtures/paths.js"
import { programArgs } from "./programs.js"

/** Generous request options for calls that are expected to succeed. */
export const T = { timeoutMs: 10_000 } as const

/** The text parts of a tool result, joined. */
export const textOf = (result: { content: ReadonlyArray<{ type: string; text?: string }> }): string =>
  result.content.map((c) => (c.type === "text" ? (c.text ?? "") : "")).join("")

/** Text of an MCP result's first text block (the `content` of a call_tool answer). */
export const firstText = (content: ReadonlyArray<{ type: string; text?: string }>): string =>
  content.find((c) => c.type === "text")?.text ?? ""

/** The rejection of a promise that must reject with McpRequestError. */
export const failureOf = async (promise: Promise<unknown>): Promise<McpRequestError> => {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e
  )
  expect(error).toBeInstanceOf(McpRequestError)
  return error as McpRequestError
}

/** A local definition (`command`, `args`) for a launch command, as add_service takes it. */
export const localService = (name: string, launch: Launch, extra: Record<string, unknown> = {}) => ({
  name,
  command: launch.command,
  args: [...launch.args],
  ...(launch.env !== undefined ? { env: { ...launch.env } } : {}),
  ...extra
})

/** The stdio fixture as a named definition, as add_service takes it. */
export const fixtureService = (name: string, ...flags: string[]) => localService(name, stdioFixture(...flags))

/** The strict server of test/fixtures/strict-server.ts (upstream JSON-RPC -32602 and -32603 answers); its arguments are worked out on first use. */
export const strictServer: Launch = {
  command: process.execPath,
  get args() {
    return programArgs(fileURLToPath(new URL("../fixtures/strict-server.ts", import.meta.url)))
  }
}

/** A resolved local (stdio) definition for a launch command, as `connect()` takes it. */
export const localDef = (launch: Launch, cwd?: string): ResolvedDefinition => ({
  kind: "local",
  transport: "stdio",
  command: launch.command,
  args: launch.args,
  env: launch.env ?? {},
  cwd
})

/** A resolved remote definition, as `connect()` takes it. */
export const remoteDef = (
  url: string,
  transport: "streamable_http" | "sse" = "streamable_http",
  headers: Record<string, string> = {}
): ResolvedDefinition => ({ kind: "remote", transport, url, headers })
