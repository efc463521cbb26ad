//! Colour on a terminal: what a coloured word means ([`Tone`]) and the ANSI escapes that
//! show it. Whether to colour at all is decided once, in `main` (`--color`, `NO_COLOR`).

/// What a coloured word means; the colour follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Healthy, passed, ok: green.
    Good,
    /// Worth a look, or a breach under `--report-only`: yellow.
    Warning,
    /// A retry storm, a failed gate, a breach: red.
    Bad,
}

impl Tone {
    /// The ANSI SGR code of the tone's foreground colour.
    pub fn ansi_code(self) -> u8 {
        match self {
            Tone::Good => 32,
            Tone::Warning => 33,
            Tone::Bad => 31,
        }
    }

    /// `text` between the escapes of this tone's colour and the reset.
    pub fn paint(self, text: &str) -> String {
        format!("\x1b[{}m{text}\x1b[0m", self.ansi_code())
    }

    /// `text` painted when `color`, else as it is.
    pub fn paint_if(self, color: bool, text: &str) -> String {
        if color {
            self.paint(text)
        } else {
            text.to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paints_with_the_escape_of_the_tone_and_a_reset() {
        assert_eq!(Tone::Good.paint("ok"), "\x1b[32mok\x1b[0m");
        assert_eq!(Tone::Bad.paint_if(true, "FAILED"), "\x1b[31mFAILED\x1b[0m");
        assert_eq!(Tone::Warning.paint_if(false, "would fail"), "would fail");
    }
}
