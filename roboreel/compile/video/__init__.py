"""Clip bytes: encode under the PSNR floor or stream copy, depth, image clips, resize, colour."""
