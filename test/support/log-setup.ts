/**
 * Vitest setup: in-process stores log through the one logger (src/logging/log.ts) to stderr; a test
 * run would fill the report with every service's lifecycle lines. Only errors are shown, unless
 * MCPSTORE_TEST_LOG names a level (debug, info, warning). Tests that check lines capture them
 * with `captureLogs`, whatever this level.
 */
import { configureLogging } from "../../src/logging/log.js"

const wanted = process.env.MCPSTORE_TEST_LOG
configureLogging({ level: wanted === "debug" || wanted === "info" || wanted === "warning" ? wanted : "error" })
