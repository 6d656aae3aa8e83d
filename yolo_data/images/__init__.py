"""Image files to pixels: decoding, resizing on load, and the images that failed to decode.

Modules, in the order data flows through them:

    decode    JPEGs by simplejpeg where it gives OpenCV's pixels, the rest by OpenCV; EXIF orientation
    load      decode and resize to the long side (YOLOv5's `load_image`); `ImageSource`
    failures  images that failed to decode, remembered until the file changes
"""
from .decode import ImageDecodeError, ImageReadError, exif_orientation, imread_bgr, read_whole
from .load import ImageSource, LoadedImage, load_image, reduction, resize_long_side

__all__ = ["ImageDecodeError", "ImageReadError", "exif_orientation", "imread_bgr", "read_whole", "ImageSource",
           "LoadedImage", "load_image", "reduction", "resize_long_side"]
